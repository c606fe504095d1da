#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <cuda_runtime.h>
#include <stdexcept>
using torch::stable::Tensor;
static cudaStream_t current_stream(const Tensor& t) {
  void* s = nullptr;
  aoti_torch_get_current_cuda_stream(t.get_device(), &s);
  return static_cast<cudaStream_t>(s);
}
#include <cublas_v2.h>
extern "C" int launch_bias_relu(float* y, const float* b, long rows, int cols, cudaStream_t s);
static cublasHandle_t handle() {
  static cublasHandle_t h = nullptr;  // one handle per process, created on first use
  if (!h) { cublasCreate(&h);  }
  return h;
}
// y[B,N] = relu(x[B,K] @ w[N,K]^T + b[N]); row-major, so cuBLAS computes y^T = w * x^T.
Tensor linear_relu(Tensor x, Tensor w, Tensor b) {
  int B = (int)x.size(0), K = (int)x.size(1), N = (int)w.size(0);
  Tensor y = torch::stable::new_empty(x, {B, N});
  cublasHandle_t h = handle();
  cudaStream_t s = current_stream(x);
  cublasSetStream(h, s);
  const float alpha = 1.f, beta = 0.f;
  if (cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, B, K, &alpha, (const float*)w.data_ptr(), K,
                  (const float*)x.data_ptr(), K, &beta, (float*)y.data_ptr(), N) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasSgemm failed");
  if (launch_bias_relu((float*)y.data_ptr(), (const float*)b.data_ptr(), B, N, s))
    throw std::runtime_error("epilogue launch failed");
  return y;
}
STABLE_TORCH_LIBRARY(cuda_ext, m) { m.def("linear_relu(Tensor x, Tensor w, Tensor b) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(cuda_ext, CUDA, m) { m.impl("linear_relu", TORCH_BOX(&linear_relu)); }
