import torch
import torch.nn as nn


def global_pool(x, batch, num_graphs):
    """Sum and mean of node features per graph; `batch` maps every node to its graph and is sorted."""
    summed = x.new_zeros(num_graphs, x.size(1))
    summed.index_add_(0, batch, x)
    count = torch.bincount(batch, minlength=num_graphs).clamp(min=1).unsqueeze(1)
    return summed, summed / count


class Model(nn.Module):
    def __init__(self, num_graphs=128):
        super().__init__()
        self.num_graphs = num_graphs

    def forward(self, x, batch):
        return global_pool(x, batch, self.num_graphs)


def get_inputs():
    num_nodes = 20000
    batch = torch.randint(0, 120, (num_nodes,)).sort().values  # graphs 120..127 stay empty
    return [torch.randn(num_nodes, 96), batch]


def get_init_inputs():
    return [128]
