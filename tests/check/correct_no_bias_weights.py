# expect: correct keep
# bias=False projections under torch's names (q_proj, k_proj, v_proj, out_proj), the course's keep
# mask with -1e9 instead of -inf, returning (output, attention weights per head).
import math

import torch
import torch.nn as nn


class MHA(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.q_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.k_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.v_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.out_proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, q, k, v, mask=None):
        B, T, C = q.shape
        S = k.shape[1]
        hs = C // self.n_head
        q = self.q_proj(q).view(B, T, self.n_head, hs).transpose(1, 2)
        k = self.k_proj(k).view(B, S, self.n_head, hs).transpose(1, 2)
        v = self.v_proj(v).view(B, S, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        if mask is not None:
            if mask.dim() == 3:
                mask = mask[:, None]
            att = att.masked_fill(mask == 0, -1e9)
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.out_proj(y), att
