// What RoPE changes in one layer's attention: the same heads' scores computed from q and k before
// the rotation, beside the trace's scores after it. With the rotation a query-key score depends on
// the tokens and on their distance i - j; without it, on the tokens alone (a Llama-family model
// has no other position signal). GUI-free: the Heads view's RoPE maps and the tests read it.
#pragma once

#include <cstdint>
#include <vector>

#include "mha.hpp"

namespace mha {

// r: a traced forward with Inputs::rotary, N = 1 (its trace holds q (1, L, E) and k (1, S, G·d_k),
// the projections, before q_rot and k_rot). Returns (H, L, S): each query head's q·kᵀ/√d_k (or
// the forward's score_divisor) against its group's key head, with no rotation and no mask. Throws
// ConfigError("rotary") for a trace without RoPE.
Tensor<float> scores_without_rope(const ForwardResult<float>& r);

// How much a head's scores depend on distance alone: for each offset i - j = 0 … L-1, the mean over
// the rows of a (L, S) score plane at that offset (causal cells only). (L,)
std::vector<double> mean_score_by_offset(const float* scores, std::int64_t L, std::int64_t S);

}  // namespace mha
