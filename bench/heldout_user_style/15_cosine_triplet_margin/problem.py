import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Triplet loss on cosine similarity for retrieval embeddings; also returns both similarities for logging."""

    def __init__(self, margin: float = 0.2, eps: float = 1e-8):
        super().__init__()
        self.margin = margin
        self.eps = eps

    def forward(self, anchor, positive, negative):
        pos_sim = F.cosine_similarity(anchor, positive, dim=-1, eps=self.eps)
        neg_sim = F.cosine_similarity(anchor, negative, dim=-1, eps=self.eps)
        loss = F.relu(self.margin - pos_sim + neg_sim).mean()
        return pos_sim, neg_sim, loss


def get_inputs():
    n, d = 4096, 300
    anchor = torch.randn(n, d)
    positive = anchor + 1.5 * torch.randn(n, d)
    negative = torch.randn(n, d)
    return [anchor, positive, negative]


def get_init_inputs():
    return [0.5, 1e-8]
