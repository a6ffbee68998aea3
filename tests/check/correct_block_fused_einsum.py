# expect: correct block
# One fused qkv layer (nanoGPT's c_attn layout: rows q, then k, then v), einsum for the scores and the
# context, torch's bool mask (True = blocked), the head axis added to a 3-D mask.
import math

import torch
import torch.nn as nn


class FusedAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.h = num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, attn_mask=None):
        E = query.shape[-1]
        w_q, w_k, w_v = self.qkv.weight.split(E, dim=0)
        b_q, b_k, b_v = self.qkv.bias.split(E, dim=0)
        q = torch.nn.functional.linear(query, w_q, b_q)
        k = torch.nn.functional.linear(key, w_k, b_k)
        v = torch.nn.functional.linear(value, w_v, b_v)
        N, L, _ = q.shape
        S = k.shape[1]
        d = E // self.h
        q = q.reshape(N, L, self.h, d)
        k = k.reshape(N, S, self.h, d)
        v = v.reshape(N, S, self.h, d)
        scores = torch.einsum("nlhd,nshd->nhls", q, k) / math.sqrt(d)
        if attn_mask is not None:
            if attn_mask.dim() == 3:
                attn_mask = attn_mask.unsqueeze(1)
            scores = scores.masked_fill(attn_mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        context = torch.einsum("nhls,nshd->nlhd", weights, v).reshape(N, L, E)
        return self.proj(context)
