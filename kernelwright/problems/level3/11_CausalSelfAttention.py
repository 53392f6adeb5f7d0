"""GPT-style causal self-attention: fused qkv linear, masked softmax attention written out, output projection."""
import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x):
        b, t, e = x.shape
        head_dim = e // self.num_heads
        q, k, v = self.qkv(x).split(self.embed_dim, dim=2)
        q = q.view(b, t, self.num_heads, head_dim).transpose(1, 2)
        k = k.view(b, t, self.num_heads, head_dim).transpose(1, 2)
        v = v.view(b, t, self.num_heads, head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        y = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, e)
        return self.proj(y)


batch_size = 8
seq_len = 1024
embed_dim = 1024
num_heads = 8


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads]
