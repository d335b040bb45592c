// The PASS line comes from the device's printf buffer, flushed at the synchronize.
#include <cstdio>
__global__ void say(int v) { if (threadIdx.x == 0 && blockIdx.x == 0) printf("devprintf: %s %d\n", v == 7 ? "PASS" : "FAIL", v); }
int main() { say<<<2, 32>>>(7); cudaError_t e = cudaDeviceSynchronize(); if (e != cudaSuccess) { fprintf(stderr, "devprintf: %s\n", cudaGetErrorString(e)); return 1; } return 0; }
