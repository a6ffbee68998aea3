# expect: error construct AssertionError
# A constructor that accepts only the sizes of its own test.
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        assert d_model == 512, "this module is written for d_model = 512"
        self.W_q = nn.Linear(d_model, d_model)

    def forward(self, Q, K, V, mask=None):
        return self.W_q(Q)
