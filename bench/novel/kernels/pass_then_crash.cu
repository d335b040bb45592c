// Prints its PASS line, then a second kernel writes through a bad pointer: the run must not pass.
#include <cstdio>
__global__ void ok(int* p) { *p = 42; }
__global__ void bad(int* p) { p[1 << 28] = 1; }
int main() {
    int* p; cudaMalloc(&p, sizeof(int)); ok<<<1, 1>>>(p); int h = 0;
    cudaMemcpy(&h, p, sizeof(int), cudaMemcpyDeviceToHost);
    printf("crashy: PASS (%d)\n", h); fflush(stdout);
    bad<<<1, 1>>>(p);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { fprintf(stderr, "crashy: CUDA error %s\n", cudaGetErrorString(e)); return 1; }
    return 0;
}
