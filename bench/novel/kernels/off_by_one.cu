// A kernel with a bug: its reduction skips the last element, and its self-check says so.
#include <cstdio>
__global__ void sum(const int* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1) atomicAdd(out, in[i]);  // the bug: n - 1
}
int main() {
    const int n = 4096; int *in, *out;
    cudaMallocManaged(&in, n * sizeof(int)); cudaMallocManaged(&out, sizeof(int));
    for (int i = 0; i < n; ++i) in[i] = 1;
    *out = 0;
    sum<<<n / 256, 256>>>(in, out, n);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { fprintf(stderr, "offbyone: CUDA error %s\n", cudaGetErrorString(e)); return 1; }
    printf("offbyone sum: %s (%d vs %d)\n", *out == n ? "PASS" : "FAIL", *out, n);
    return *out == n ? 0 : 1;
}
