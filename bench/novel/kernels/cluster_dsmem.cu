// Thread block clusters (CC 9.0): each block of a 2-block cluster reads its partner's shared
// memory through distributed shared memory (cluster.map_shared_rank).
#include <cooperative_groups.h>
#include <cstdio>
namespace cg = cooperative_groups;
__global__ void __cluster_dims__(2, 1, 1) swap_ranks(int* out) {
    __shared__ int mine;
    cg::cluster_group cluster = cg::this_cluster();
    unsigned rank = cluster.block_rank();
    if (threadIdx.x == 0) mine = 100 + (int)rank;
    cluster.sync();
    int* partner = cluster.map_shared_rank(&mine, rank ^ 1u);
    if (threadIdx.x == 0) out[blockIdx.x] = *partner;
    cluster.sync();  // the partner's shared memory must outlive this block's read
}
int main() {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (major < 9) { fprintf(stderr, "cluster: needs thread block clusters (CC 9.0+)\n"); return 2; }
    const int blocks = 16; int* out;
    cudaMallocManaged(&out, blocks * sizeof(int));
    swap_ranks<<<blocks, 32>>>(out);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { fprintf(stderr, "cluster: CUDA error %s\n", cudaGetErrorString(e)); return 1; }
    int bad = 0;
    for (int b = 0; b < blocks; ++b) bad += out[b] != 100 + ((b % 2) ^ 1);
    printf("cluster dsmem over %d blocks: %s (%d wrong)\n", blocks, bad ? "FAIL" : "PASS", bad);
    return bad ? 1 : 0;
}
