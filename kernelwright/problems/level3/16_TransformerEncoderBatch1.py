"""Pre-norm transformer encoder, four layers, on one sequence of 32 tokens of width 256.

Each layer: LayerNorm, multi-head self-attention written out (fused qkv linear, softmax of the scaled
scores, output projection), residual, LayerNorm, GELU MLP, residual. Launch-bound: 57 ATen ops a forward
(16 linears, 8 batched matmuls, 9 LayerNorms), each on at most 32x1024 values.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class EncoderLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, mlp_ratio):
        super().__init__()
        self.num_heads = num_heads
        self.norm1 = nn.LayerNorm(embed_dim)
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, mlp_ratio * embed_dim)
        self.fc2 = nn.Linear(mlp_ratio * embed_dim, embed_dim)

    def forward(self, x):
        b, t, e = x.shape
        head_dim = e // self.num_heads
        q, k, v = self.qkv(self.norm1(x)).split(e, dim=2)
        q = q.view(b, t, self.num_heads, head_dim).transpose(1, 2)
        k = k.view(b, t, self.num_heads, head_dim).transpose(1, 2)
        v = v.view(b, t, self.num_heads, head_dim).transpose(1, 2)
        attn = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim), dim=-1)
        x = x + self.proj(torch.matmul(attn, v).transpose(1, 2).reshape(b, t, e))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, embed_dim, num_heads, mlp_ratio, num_layers):
        super().__init__()
        layers = [EncoderLayer(embed_dim, num_heads, mlp_ratio) for _ in range(num_layers)]
        self.layers = nn.Sequential(*layers)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x):
        return self.norm(self.layers(x))


batch_size = 1
seq_len = 32
embed_dim = 256
num_heads = 4
mlp_ratio = 4
num_layers = 4


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads, mlp_ratio, num_layers]
