import torch
import torch.nn as nn


class Model(nn.Module):
    """Log-probabilities of sampled tokens under the policy, masked to the response, and their per-sequence sums."""

    def forward(self, logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor):
        logp = torch.log_softmax(logits.float(), dim=-1)
        token_logp = torch.gather(logp, -1, tokens.unsqueeze(-1)).squeeze(-1)
        token_logp = token_logp * mask
        return token_logp, token_logp.sum(-1)


def get_inputs():
    B, T, V = 4, 96, 5003
    logits = torch.randn(B, T, V) * 3
    tokens = torch.randint(0, V, (B, T))
    prompt_len = torch.randint(10, 60, (B, 1))
    mask = torch.arange(T)[None, :] >= prompt_len
    return [logits, tokens, mask]


def get_init_inputs():
    return []
