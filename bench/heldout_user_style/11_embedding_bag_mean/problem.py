import torch
import torch.nn as nn


class Model(nn.Module):
    """Bag-of-words sentence encoder: the mean of the token embeddings, padding excluded."""

    def __init__(self, vocab_size=20000, dim=128, pad_id=0):
        super().__init__()
        self.pad_id = pad_id
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)

    def forward(self, token_ids):
        mask = token_ids.ne(self.pad_id)
        emb = self.embed(token_ids) * mask.unsqueeze(-1)
        lengths = mask.sum(dim=1, keepdim=True).clamp(min=1)
        return emb.sum(dim=1) / lengths


def get_inputs():
    batch, max_len = 64, 180
    ids = torch.randint(1, 20000, (batch, max_len))
    lengths = torch.randint(0, max_len + 1, (batch,))
    ids[torch.arange(max_len)[None, :] >= lengths[:, None]] = 0  # right padding; some rows are all padding
    return [ids]


def get_init_inputs():
    return [20000, 128, 0]
