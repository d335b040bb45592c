// Dynamic parallelism (CDP2): each parent block launches a child grid from the device.
#include <cstdio>
__global__ void child(int* out, int base) { out[base + threadIdx.x] = base + threadIdx.x; }
__global__ void parent(int* out) {
    if (threadIdx.x == 0) child<<<1, 32>>>(out, blockIdx.x * 32);
}
int main() {
    const int blocks = 64, n = blocks * 32; int* out;
    cudaMallocManaged(&out, n * sizeof(int));
    for (int i = 0; i < n; ++i) out[i] = -1;
    parent<<<blocks, 32>>>(out);
    cudaError_t e = cudaDeviceSynchronize();  // a parent grid completes only after its children
    if (e != cudaSuccess) { fprintf(stderr, "cdp: CUDA error %s\n", cudaGetErrorString(e)); return 1; }
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += out[i] != i;
    printf("cdp child grids from %d parents: %s (%d wrong)\n", blocks, bad ? "FAIL" : "PASS", bad);
    return bad ? 1 : 0;
}
