import torch
import torch.nn as nn


class Model(nn.Module):
    """Soft Dice loss for binary segmentation with boolean ground-truth masks; also returns the per-image Dice."""

    def __init__(self, smooth: float = 1.0):
        super().__init__()
        self.smooth = smooth

    def forward(self, logits, target):
        # logits: (B, 1, H, W); target: (B, H, W) bool
        probs = logits.sigmoid().flatten(1)
        target = target.flatten(1).float()
        intersection = (probs * target).sum(-1)
        denominator = probs.sum(-1) + target.sum(-1)
        dice = (2.0 * intersection + self.smooth) / (denominator + self.smooth)
        return 1.0 - dice.mean(), dice


def get_inputs():
    B, H, W = 16, 160, 160
    yy, xx = torch.meshgrid(torch.arange(H), torch.arange(W), indexing="ij")
    centers = torch.randint(30, 130, (B, 2))
    radius = torch.randint(10, 40, (B, 1, 1))
    target = (yy[None] - centers[:, 0, None, None]) ** 2 + (xx[None] - centers[:, 1, None, None]) ** 2 < radius**2
    logits = torch.randn(B, 1, H, W) * 2 + (target.float() * 4 - 2)[:, None]
    return [logits, target]


def get_init_inputs():
    return [1.0]
