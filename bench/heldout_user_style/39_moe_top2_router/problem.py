import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Top-k expert routing of a mixture-of-experts layer, with the switch-style load-balancing loss."""

    def __init__(self, num_experts: int = 8, top_k: int = 2, normalize: bool = True):
        super().__init__()
        self.num_experts = num_experts
        self.top_k = top_k
        self.normalize = normalize

    def forward(self, router_logits: torch.Tensor):
        probs = F.softmax(router_logits, dim=-1, dtype=torch.float)
        top_logits, experts = torch.topk(router_logits, self.top_k, dim=-1)
        if self.normalize:  # renormalised over the chosen experts
            weights = F.softmax(top_logits, dim=-1)
        else:
            weights = probs.gather(-1, experts)
        # fraction of tokens whose first choice is each expert, times the mean router probability of that expert
        load = F.one_hot(experts[:, 0], self.num_experts).float().mean(dim=0)
        importance = probs.mean(dim=0)
        aux_loss = self.num_experts * (load * importance).sum()
        return weights, experts, aux_loss


def get_inputs():
    return [torch.randn(16384, 8) * 2]


def get_init_inputs():
    return [8, 2, True]
