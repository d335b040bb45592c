// Cooperative grid-wide sync: sum of 1..N in two phases with grid.sync().
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;
__global__ void two_phase(const int* in, int* partial, long long* out, int n) {
    cg::grid_group grid = cg::this_grid();
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    int acc = 0;
    for (int i = tid; i < n; i += gridDim.x * blockDim.x) acc += in[i];
    atomicAdd(&partial[blockIdx.x], acc);
    grid.sync();
    if (tid == 0) { long long s = 0; for (int b = 0; b < gridDim.x; ++b) s += partial[b]; *out = s; }
}
int main() {
    int dev = 0, coop = 0, major = 0;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (!coop || major < 7) { fprintf(stderr, "coop: needs cooperative launch (CC 7.0+)\n"); return 2; }
    const int n = 1 << 20; int *in, *partial; long long* out;
    cudaMallocManaged(&in, n * sizeof(int)); cudaMallocManaged(&partial, 1024 * sizeof(int)); cudaMallocManaged(&out, 8);
    for (int i = 0; i < n; ++i) in[i] = i % 7;
    int blocks = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, two_phase, 256, 0);
    int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    int grid = blocks * sms; if (grid > 1024) grid = 1024;
    cudaMemset(partial, 0, 1024 * sizeof(int));
    int nn = n; void* args[] = {&in, &partial, &out, &nn};
    cudaError_t e = cudaLaunchCooperativeKernel((void*)two_phase, grid, 256, args, 0, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { fprintf(stderr, "coop: CUDA error %s\n", cudaGetErrorString(e)); return 1; }
    long long want = 0; for (int i = 0; i < n; ++i) want += i % 7;
    printf("coop grid sync over %d blocks: %s (%lld vs %lld)\n", grid, *out == want ? "PASS" : "FAIL", *out, want);
    return *out == want ? 0 : 1;
}
