// A kernel for CC 10.0 and later: on an older card its gate refuses, naming what it needs.
#include <cstdio>
__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }
int main() {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (major < 10) { fprintf(stderr, "future: needs CC 10.0+ (this card is CC %d.x)\n", major); return 2; }
    float* x; cudaMallocManaged(&x, 256 * sizeof(float));
    for (int i = 0; i < 256; ++i) x[i] = i;
    scale<<<1, 256>>>(x, 256);
    cudaDeviceSynchronize();
    int bad = 0; for (int i = 0; i < 256; ++i) bad += x[i] != 2.0f * i;
    printf("future: %s\n", bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}
