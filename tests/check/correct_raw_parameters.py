# expect: correct keep
# Bare nn.Parameter weights used as x @ W (in, out), with bare biases b_q, b_k, b_v, b_o.
import math

import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h = num_heads
        for name in ("q", "k", "v", "o"):
            setattr(self, f"W_{name}", nn.Parameter(torch.randn(d_model, d_model) / math.sqrt(d_model)))
            setattr(self, f"b_{name}", nn.Parameter(torch.randn(d_model) * 0.1))

    def forward(self, Q, K, V, mask=None):
        N, L, E = Q.shape
        d = E // self.h
        q = (Q @ self.W_q + self.b_q).view(N, L, self.h, d).transpose(1, 2)
        k = (K @ self.W_k + self.b_k).view(N, -1, self.h, d).transpose(1, 2)
        v = (V @ self.W_v + self.b_v).view(N, -1, self.h, d).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None:
            s = s.masked_fill((mask.unsqueeze(1) if mask.dim() == 3 else mask) == 0, float("-inf"))
        context = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(N, L, E)
        return context @ self.W_o + self.b_o
