import torch
import torch.nn as nn
import torch.nn.functional as F


def mean_pooling(token_embeddings, attention_mask):
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
    summed = (token_embeddings * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1e-9)
    return summed / counts


class Model(nn.Module):
    """Sentence embedding from encoder states: attention-masked mean over tokens, optionally L2-normalised."""

    def __init__(self, normalize: bool = True):
        super().__init__()
        self.normalize = normalize

    def forward(self, hidden_states, attention_mask):
        emb = mean_pooling(hidden_states, attention_mask)
        if self.normalize:
            emb = F.normalize(emb, p=2, dim=-1)
        return emb


def get_inputs():
    batch, seq, dim = 32, 384, 768
    hidden = torch.randn(batch, seq, dim, dtype=torch.bfloat16)
    lengths = torch.randint(1, seq + 1, (batch,))
    attention_mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    return [hidden, attention_mask]


def get_init_inputs():
    return [True]
