// The block sum of race.cu done right: a __syncthreads() between the writes
// and thread 0's reads. Every compute-sanitizer tool finds nothing.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void block_sum(const int* in, int* out) {
    __shared__ int partial[256];
    partial[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int i = 0; i < 256; ++i) total += partial[i];
        *out = total;
    }
}

int main() {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major * 10 + prop.minor < 75) {
        std::fprintf(stderr, "this program needs compute capability 7.5 and this device is %d.%d\n", prop.major, prop.minor);
        return 1;
    }
    int host[256], expected = 0;
    for (int i = 0; i < 256; ++i) expected += host[i] = i;
    int *in, *out, got = -1;
    cudaMalloc(&in, sizeof host);
    cudaMalloc(&out, sizeof(int));
    cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice);
    block_sum<<<1, 256>>>(in, out);
    cudaMemcpy(&got, out, sizeof(int), cudaMemcpyDeviceToHost);
    if (got != expected) {
        std::fprintf(stderr, "clean: sum %d, expected %d\n", got, expected);
        return 1;
    }
    std::printf("clean: sum %d: PASS\n", got);
    cudaFree(in);
    cudaFree(out);
    return 0;
}
