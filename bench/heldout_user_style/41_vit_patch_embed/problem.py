import torch
import torch.nn as nn


class Model(nn.Module):
    """ViT input stem without a convolution: cut the image into patches, project them, prepend the class token and
    add position embeddings."""

    def __init__(self, img_size=96, patch_size=8, in_chans=3, embed_dim=384):
        super().__init__()
        self.patch_size = patch_size
        num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)

    def forward(self, x):
        B, C, H, W = x.shape
        p = self.patch_size
        x = x.reshape(B, C, H // p, p, W // p, p)
        x = x.permute(0, 2, 4, 1, 3, 5).reshape(B, (H // p) * (W // p), C * p * p)
        x = self.proj(x)
        x = torch.cat([self.cls_token.expand(B, -1, -1), x], dim=1)
        return x + self.pos_embed


def get_inputs():
    return [torch.randn(32, 3, 96, 96)]


def get_init_inputs():
    return [96, 8, 3, 384]
