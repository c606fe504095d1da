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
extern "C" int launch_row_sum(const float* x, float* y, int rows, int cols, cudaStream_t s);
Tensor row_sum(Tensor x) {
  if (!x.is_contiguous() || x.dim() != 2) throw std::runtime_error("row_sum: contiguous 2-D input");
  int rows = (int)x.size(0), cols = (int)x.size(1);
  Tensor y = torch::stable::new_empty(x, {rows, 1});
  if (launch_row_sum((const float*)x.data_ptr(), (float*)y.data_ptr(), rows, cols, current_stream(x)))
    throw std::runtime_error("row_sum launch failed");
  return y;
}
STABLE_TORCH_LIBRARY(cuda_ext, m) { m.def("row_sum(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(cuda_ext, CUDA, m) { m.impl("row_sum", TORCH_BOX(&row_sum)); }
