// Python binding of the LayerNorm kernel in layernorm_kernel.cu (built together by torch.utils.cpp_extension.load).
#include <torch/extension.h>

void launch_layernorm(const float* x, const float* gamma, const float* beta, float* y, int rows, int cols,
                      float eps);

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "layernorm: expected a float32 CUDA tensor");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    const int cols = static_cast<int>(input.size(-1));
    const int rows = static_cast<int>(input.numel() / cols);
    launch_layernorm(input.data_ptr<float>(), gamma.contiguous().data_ptr<float>(),
                     beta.contiguous().data_ptr<float>(), out.data_ptr<float>(), rows, cols,
                     static_cast<float>(eps));
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &layernorm_forward, "LayerNorm over the last axis (CUDA)");
}
