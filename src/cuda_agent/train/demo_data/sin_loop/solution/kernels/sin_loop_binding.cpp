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
extern "C" int launch_sin_loop(const float* x, float* y, long n, int iters, cudaStream_t s);
Tensor sin_loop(Tensor x, int64_t iters) {
  if (!x.is_contiguous()) throw std::runtime_error("sin_loop: contiguous input");
  Tensor y = torch::stable::empty_like(x);
  if (launch_sin_loop((const float*)x.data_ptr(), (float*)y.data_ptr(), x.numel(), (int)iters, current_stream(x)))
    throw std::runtime_error("sin_loop launch failed");
  return y;
}
STABLE_TORCH_LIBRARY(cuda_ext, m) { m.def("sin_loop(Tensor x, int iters) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(cuda_ext, CUDA, m) { m.impl("sin_loop", TORCH_BOX(&sin_loop)); }
