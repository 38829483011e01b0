import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Box-regression loss of a detector: smooth L1 over the positive anchors only, normalised by their number."""

    def __init__(self, beta=1.0 / 9.0):
        super().__init__()
        self.beta = beta

    def forward(self, pred_deltas, target_deltas, positive):
        # pred_deltas, target_deltas: (num_anchors, 4); positive: (num_anchors,) bool
        loss = F.smooth_l1_loss(pred_deltas[positive], target_deltas[positive], beta=self.beta, reduction="sum")
        return loss / positive.sum().clamp(min=1)


def get_inputs():
    n = 100_000
    pred = torch.randn(n, 4) * 0.5
    target = pred + torch.randn(n, 4) * 0.3
    positive = torch.rand(n) < 0.05
    return [pred, target, positive]


def get_init_inputs():
    return [1.0 / 9.0]
