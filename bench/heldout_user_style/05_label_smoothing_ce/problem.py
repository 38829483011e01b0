import torch
import torch.nn as nn


class Model(nn.Module):
    """Token-level classification loss with label smoothing; padded positions carry the ignore index."""

    def __init__(self, num_classes: int, label_smoothing: float = 0.1, ignore_index: int = -100):
        super().__init__()
        self.num_classes = num_classes
        self.criterion = nn.CrossEntropyLoss(ignore_index=ignore_index, label_smoothing=label_smoothing)

    def forward(self, logits, target):
        return self.criterion(logits.view(-1, self.num_classes), target.view(-1))


def get_inputs():
    logits = torch.randn(8, 128, 1000) * 8.0  # confident, large logits
    target = torch.randint(0, 1000, (8, 128))
    target[torch.rand(8, 128) < 0.1] = -100
    return [logits, target]


def get_init_inputs():
    return [1000, 0.1, -100]
