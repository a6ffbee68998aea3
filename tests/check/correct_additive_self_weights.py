# expect: correct additive
# Self-attention forward(x, mask) with an additive mask (0 / -inf added to the scores), lucidrains'
# names (to_q, to_k, to_v, to_out as Sequential(Linear, Dropout)), returning (output, weights).
import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, dim, heads=8, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.to_out = nn.Sequential(nn.Linear(dim, dim), nn.Dropout(dropout))

    def forward(self, x, mask=None):
        b, n, dim = x.shape
        h = self.heads
        q, k, v = (t(x).view(b, n, h, dim // h).transpose(1, 2) for t in (self.to_q, self.to_k, self.to_v))
        dots = (q * self.scale) @ k.transpose(-1, -2)
        if mask is not None:
            dots = dots + (mask.unsqueeze(1) if mask.dim() == 3 else mask)
        attn = dots.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, n, dim)
        return self.to_out(out), attn
