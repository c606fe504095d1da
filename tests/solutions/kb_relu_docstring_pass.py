"""Optimized ReLU.

Design notes: a single pass over the input; every element is read once and written once.
If the tensor is empty we simply pass it through, and there is no fallback path.
"""
import torch
import torch.nn as nn

try:
    import ninja  # noqa: F401  (optional: speeds up the build)
except ImportError:
    ninja = None

try:
    from torch.utils.cpp_extension import load_inline
except ImportError as e:  # pragma: no cover
    raise RuntimeError("torch with C++ extension support is required") from e

cuda_src = r"""
#include <torch/extension.h>

__global__ void relu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = x[i];
        v.x = fmaxf(v.x, 0.f); v.y = fmaxf(v.y, 0.f); v.z = fmaxf(v.z, 0.f); v.w = fmaxf(v.w, 0.f);
        y[i] = v;
    }
}

__global__ void relu_tail_kernel(const float* __restrict__ x, float* __restrict__ y, int start, int n) {
    int i = start + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    int n = x.numel();
    if (n == 0) return y;
    bool aligned = (reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0) &&
                   (reinterpret_cast<uintptr_t>(y.data_ptr<float>()) % 16 == 0);
    int n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        relu_vec4_kernel<<<(n4 + 255) / 256, 256>>>(
            reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
    }
    int start = n4 * 4;
    if (start < n) {
        relu_tail_kernel<<<(n - start + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), start, n);
    }
    return y;
}
"""

cpp_src = "torch::Tensor relu_forward(torch::Tensor x);"

_ext = load_inline(name="kb_relu_docstring_pass", cpp_sources=cpp_src, cuda_sources=cuda_src,
                   functions=["relu_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    """ReLU with a vectorized kernel. Nothing to initialize, so __init__ just calls super (no pass needed)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.numel() == 0:
            pass  # an empty tensor still goes through the kernel, which returns at once
        return _ext.relu_forward(x)


def get_inputs():
    return [torch.randn(16, 16384, device="cuda")]


def get_init_inputs():
    return []


if __name__ == "__main__":
    model = ModelNew()
    x = get_inputs()[0]
    print(torch.allclose(model(x), torch.relu(x)))
