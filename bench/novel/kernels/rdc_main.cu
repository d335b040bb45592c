#include <cstdio>
extern __device__ float scale(float x);
__global__ void apply(float* v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) v[i] = scale(v[i]); }
int main() {
    const int n = 1000; float* v; cudaMallocManaged(&v, n * sizeof(float));
    for (int i = 0; i < n; ++i) v[i] = i;
    apply<<<(n + 127) / 128, 128>>>(v, n);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { fprintf(stderr, "rdc: CUDA error %s\n", cudaGetErrorString(e)); return 1; }
    for (int i = 0; i < n; ++i) if (v[i] != 3.0f * i + 1.0f) { printf("rdc: FAIL at %d\n", i); return 1; }
    printf("rdc separate compilation: PASS\n");
    return 0;
}
