// Fills n elements and writes one past the end: the allocation's padding takes
// the stray write, the n elements are right, and compute-sanitizer's memcheck
// reports an invalid __global__ write.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = i;  // the bug: <= instead of <
}

int main() {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major * 10 + prop.minor < 75) {
        std::fprintf(stderr, "this program needs compute capability 7.5 and this device is %d.%d\n", prop.major, prop.minor);
        return 1;
    }
    const int n = 1000;
    int* out;
    cudaMalloc(&out, n * sizeof(int));
    fill<<<(n + 256) / 256, 256>>>(out, n);
    static int host[n];
    cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
    for (int i = 0; i < n; ++i) {
        if (host[i] != i) {
            std::fprintf(stderr, "oob: element %d is %d\n", i, host[i]);
            return 1;
        }
    }
    std::printf("oob: %d elements: PASS\n", n);
    return 0;
}
