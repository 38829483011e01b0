import torch
import torch.nn as nn


class Model(nn.Module):
    """Gated linear recurrence (a minimal RNN cell without matmuls): h_t = a_t * h_{t-1} + (1 - a_t) * x_t,
    with a_t = sigmoid(gate_t + decay_bias) per channel."""

    def __init__(self, d_model: int):
        super().__init__()
        self.decay_bias = nn.Parameter(torch.linspace(-1.0, 3.0, d_model))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(gate + self.decay_bias)
        h = torch.zeros_like(x[:, 0])
        outputs = []
        for t in range(x.size(1)):
            h = a[:, t] * h + (1 - a[:, t]) * x[:, t]
            outputs.append(h)
        return torch.stack(outputs, dim=1)


def get_inputs():
    B, T, D = 16, 256, 512
    return [torch.randn(B, T, D), torch.randn(B, T, D)]


def get_init_inputs():
    return [512]
