import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Sigmoid focal loss for dense detection (one-vs-all over classes), with integer class labels."""

    def __init__(self, num_classes: int, alpha: float = 0.25, gamma: float = 2.0, reduction: str = "mean"):
        super().__init__()
        self.num_classes = num_classes
        self.alpha = alpha
        self.gamma = gamma
        self.reduction = reduction

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        targets = F.one_hot(labels, self.num_classes).to(logits.dtype)
        p = torch.sigmoid(logits)
        ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce * (1 - p_t) ** self.gamma
        alpha_t = self.alpha * targets + (1 - self.alpha) * (1 - targets)
        loss = alpha_t * loss
        if self.reduction == "mean":
            return loss.mean()
        return loss.sum()


def get_inputs():
    return [torch.randn(8192, 80) * 4 - 2, torch.randint(0, 80, (8192,))]


def get_init_inputs():
    return [80, 0.25, 2.0, "mean"]
