import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, vocab_size=8192, hidden_size=256, max_position=512, type_vocab_size=2, eps=1e-12, dropout=0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_position, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("position_ids", torch.arange(max_position).expand((1, -1)), persistent=False)
        self._init_weights()

    def _init_weights(self):
        for emb in (self.word_embeddings, self.position_embeddings, self.token_type_embeddings):
            nn.init.normal_(emb.weight, std=0.02)
        nn.init.normal_(self.LayerNorm.weight, mean=1.0, std=0.05)
        nn.init.normal_(self.LayerNorm.bias, std=0.05)

    def forward(self, input_ids, token_type_ids):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        embeddings = self.LayerNorm(embeddings)
        return self.dropout(embeddings)


def get_inputs():
    input_ids = torch.randint(0, 8192, (16, 200))
    token_type_ids = (torch.arange(200)[None, :] >= torch.randint(20, 180, (16, 1))).long()
    return [input_ids, token_type_ids]


def get_init_inputs():
    return [8192, 256, 512, 2, 1e-12, 0.1]
