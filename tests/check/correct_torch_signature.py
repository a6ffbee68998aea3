# expect: correct block
# torch's own forward signature and module inside a wrapper: query/key/value, key_padding_mask,
# need_weights, attn_mask (per-batch masks passed on as torch's (N*H, L, S) with repeat_interleave).
import torch
import torch.nn as nn


class Wrapped(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None):
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask.repeat_interleave(self.num_heads, dim=0)
        return self.mha(query, key, value, key_padding_mask=key_padding_mask, need_weights=need_weights,
                        attn_mask=attn_mask, average_attn_weights=False)
