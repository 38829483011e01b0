import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """CLIP-style symmetric contrastive loss over a batch of paired image/text embeddings."""

    def __init__(self, init_temperature=0.07):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / init_temperature)))

    def forward(self, image_features, text_features):
        image_features = image_features / image_features.norm(dim=-1, keepdim=True)
        text_features = F.normalize(text_features, dim=-1)
        logits_per_image = self.logit_scale.exp() * image_features @ text_features.t()
        labels = torch.arange(logits_per_image.shape[0], device=logits_per_image.device)
        loss = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.t(), labels)) / 2
        return logits_per_image, loss


def get_inputs():
    shared = torch.randn(512, 512)
    return [shared + torch.randn(512, 512), shared + torch.randn(512, 512)]


def get_init_inputs():
    return [0.07]
