import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Knowledge distillation: tempered KL to the teacher plus cross-entropy on the labels."""

    def __init__(self, temperature: float = 4.0, alpha: float = 0.7):
        super().__init__()
        self.temperature = temperature
        self.alpha = alpha

    def forward(self, student_logits, teacher_logits, labels):
        T = self.temperature
        soft = F.kl_div(
            F.log_softmax(student_logits / T, dim=-1),
            F.softmax(teacher_logits / T, dim=-1),
            reduction="batchmean",
        ) * (T * T)
        hard = F.cross_entropy(student_logits, labels)
        return self.alpha * soft + (1.0 - self.alpha) * hard


def get_inputs():
    student = torch.randn(512, 1000) * 3
    teacher = student + torch.randn(512, 1000) * 2
    return [student, teacher, torch.randint(0, 1000, (512,))]


def get_init_inputs():
    return [4.0, 0.7]
