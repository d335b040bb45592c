__device__ float scale(float x) { return 3.0f * x + 1.0f; }
