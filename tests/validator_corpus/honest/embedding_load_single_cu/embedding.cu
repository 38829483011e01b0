// Embedding lookup: one thread per output element, grid-stride loop; built with torch.utils.cpp_extension.load.
#include <torch/extension.h>

__global__ void embedding_lookup_kernel(const int64_t* __restrict__ ids, const float* __restrict__ table,
                                        float* __restrict__ out, int64_t total, int64_t dim) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t token = i / dim;
        out[i] = table[ids[token] * dim + i % dim];
    }
}

torch::Tensor lookup(torch::Tensor ids, torch::Tensor table) {
    auto idx = ids.contiguous();
    auto weight = table.contiguous();
    const int64_t dim = weight.size(1);
    auto shape = idx.sizes().vec();
    shape.push_back(dim);
    auto out = torch::empty(shape, weight.options());
    const int64_t total = out.numel();
    embedding_lookup_kernel<<<2048, 256>>>(idx.data_ptr<int64_t>(), weight.data_ptr<float>(), out.data_ptr<float>(),
                                           total, dim);
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("lookup", &lookup, "embedding lookup (CUDA)");
}
