// FP8 (E4M3) conversions on the device (hardware cvt on CC 8.9+): values E4M3 holds exactly come
// back unchanged, and 1/3 rounds to the nearest E4M3 value, 0.34375 (steps of 1/32 in [0.25, 0.5)).
#include <cuda_fp8.h>
#include <cstdio>
__global__ void roundtrip(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float(__nv_fp8_e4m3(in[i]));
}
int main() {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (major * 10 + minor < 89) { fprintf(stderr, "fp8: needs FP8 conversions (CC 8.9+)\n"); return 2; }
    const float want[] = {0.0f, 0.5f, 1.0f, 1.5f, -3.0f, 448.0f, 0.015625f, 0.34375f};
    const float in[] = {0.0f, 0.5f, 1.0f, 1.5f, -3.0f, 448.0f, 0.015625f, 1.0f / 3.0f};
    const int n = 8; float *d_in, *d_out, got[n];
    cudaMalloc(&d_in, sizeof in); cudaMalloc(&d_out, sizeof in);
    cudaMemcpy(d_in, in, sizeof in, cudaMemcpyHostToDevice);
    roundtrip<<<1, 32>>>(d_in, d_out, n);
    cudaError_t e = cudaMemcpy(got, d_out, sizeof got, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) { fprintf(stderr, "fp8: CUDA error %s\n", cudaGetErrorString(e)); return 1; }
    int bad = 0;
    for (int i = 0; i < n; ++i) bad += got[i] != want[i];
    printf("fp8 e4m3 round trip of %d values: %s (%d wrong)\n", n, bad ? "FAIL" : "PASS", bad);
    return bad ? 1 : 0;
}
