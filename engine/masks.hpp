// Mask helpers: the named conversion from the course's "keep" convention (1 = attend) to torch's
// (True = blocked), the usual mask builders, and torch's merge of attn_mask with key_padding_mask.
#pragma once

#include <cstdint>
#include <optional>

#include "mha.hpp"

namespace mha {

// The other half of the course writes masks as 1 = attend, 0 = blocked (`masked_fill(mask == 0, -inf)`).
// torch reads True as blocked. This converts explicitly: blocked = (keep == 0). It is never guessed.
template <class T>
Mask<T> mask_from_keep(const Tensor<T>& keep);

// torch.triu(torch.ones(L, S, dtype=bool), diagonal=1): query i may not see keys j > i.
template <class T>
Mask<T> causal_mask(std::int64_t L, std::int64_t S);

// (N, S) bool key_padding_mask: key j of batch item n is padding when j >= valid_lengths[n].
template <class T>
Mask<T> key_padding_from_lengths(const std::vector<std::int64_t>& valid_lengths, std::int64_t S);

// torch's merged additive mask, as multi_head_attention_forward builds it (pad for bias_k and the
// zero row, logical_or / masked_fill with key_padding_mask, bool -> 0 / -inf). It is held in its
// smallest broadcast shape (n_size, h_size, l_size, S_total), each of the first three 1 or full.
template <class T>
struct MergedMask {
  std::int64_t n_size = 1, h_size = 1, l_size = 1, s_size = 0;
  std::vector<T> values;
};

// Validates both masks against `d` and merges them; nullopt when neither is given.
// Throws ShapeError / DtypeError with torch's reasons and the expected shapes.
template <class T>
std::optional<MergedMask<T>> merge_masks(const Dims& d, const std::optional<Mask<T>>& attn_mask,
                                         const std::optional<Mask<T>>& key_padding_mask, MaskLayout layout,
                                         std::vector<std::string>* warnings);

}  // namespace mha
