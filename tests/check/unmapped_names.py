# expect: error weights
# expect with --map A=q,B=k,C=v,D=o: correct keep
# Layers whose names say nothing: --map names them.
import math

import torch
import torch.nn as nn


class Attn(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.h = num_heads
        self.A = nn.Linear(d_model, d_model)
        self.B = nn.Linear(d_model, d_model)
        self.C = nn.Linear(d_model, d_model)
        self.D = nn.Linear(d_model, d_model)

    def forward(self, Q, K, V, mask=None):
        N, L, E = Q.shape
        d = E // self.h
        q = self.A(Q).view(N, L, self.h, d).transpose(1, 2)
        k = self.B(K).view(N, -1, self.h, d).transpose(1, 2)
        v = self.C(V).view(N, -1, self.h, d).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None:
            s = s.masked_fill((mask.unsqueeze(1) if mask.dim() == 3 else mask) == 0, float("-inf"))
        return self.D((s.softmax(-1) @ v).transpose(1, 2).reshape(N, L, E))
