// SGEMM through cuBLAS (linked with -lcublas) against a CPU reference.
#include <cublas_v2.h>
#include <cmath>
#include <cstdio>
#include <vector>
int main() {
    const int n = 128;
    std::vector<float> a(n * n), b(n * n), c(n * n), ref(n * n, 0.0f);
    for (int i = 0; i < n * n; ++i) { a[i] = (i % 13) * 0.25f - 1.0f; b[i] = (i % 7) * 0.5f - 1.5f; }
    for (int col = 0; col < n; ++col)
        for (int k = 0; k < n; ++k)
            for (int row = 0; row < n; ++row) ref[row + col * n] += a[row + k * n] * b[k + col * n];
    float *da, *db, *dc;
    cudaMalloc(&da, n * n * sizeof(float)); cudaMalloc(&db, n * n * sizeof(float)); cudaMalloc(&dc, n * n * sizeof(float));
    cudaMemcpy(da, a.data(), n * n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), n * n * sizeof(float), cudaMemcpyHostToDevice);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "cublas: cublasCreate failed\n"); return 1; }
    cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);  // no TF32: the reference is plain FP32
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n);
    cudaMemcpy(c.data(), dc, n * n * sizeof(float), cudaMemcpyDeviceToHost);
    if (s != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "cublas: sgemm status %d\n", (int)s); return 1; }
    double worst = 0;
    for (int i = 0; i < n * n; ++i) worst = fmax(worst, fabs(c[i] - ref[i]) / (fabs(ref[i]) + 1.0));
    printf("cublas sgemm %dx%d: %s (worst relative error %.2e)\n", n, n, worst < 1e-4 ? "PASS" : "FAIL", worst);
    cublasDestroy(h);
    return worst < 1e-4 ? 0 : 1;
}
