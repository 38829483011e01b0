import torch
import torch.nn as nn


class Model(nn.Module):
    """Batch-norm training step written functionally: normalise with the batch statistics and return the updated
    running statistics instead of writing them in place."""

    def __init__(self, num_features: int, momentum: float = 0.1, eps: float = 1e-5):
        super().__init__()
        self.momentum = momentum
        self.eps = eps
        self.register_buffer("running_mean", 0.1 * torch.randn(num_features))
        self.register_buffer("running_var", 0.5 + torch.rand(num_features))

    def forward(self, x: torch.Tensor):
        n = x.shape[0]
        mean = x.mean(dim=0)
        var = x.var(dim=0, unbiased=False)
        x_hat = (x - mean) / torch.sqrt(var + self.eps)
        unbiased_var = var * n / (n - 1)
        new_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
        new_var = (1 - self.momentum) * self.running_var + self.momentum * unbiased_var
        return x_hat, new_mean, new_var


def get_inputs():
    return [torch.randn(8192, 384) * torch.linspace(0.5, 3.0, 384) + torch.linspace(-2.0, 2.0, 384)]


def get_init_inputs():
    return [384, 0.1, 1e-5]
