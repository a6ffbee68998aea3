// Masks, in one place for the engine, the app and the CLI: the named presets and their cells, the
// scope -> shape rule, the three conventions and the conversions between them (the named one from the
// course's "keep" convention, 1 = attend, to torch's True = blocked), and torch's merge of attn_mask
// with key_padding_mask.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "mha.hpp"

namespace mha {

// ---- presets, scopes, conventions ----

enum class MaskPreset { none, causal, padding, sliding_window, block_diagonal, prefix_lm, random, custom };
enum class MaskScope { shared, per_batch, per_head };  // (L, S) / (N, L, S) / (N·H, L, S)
// How a mask is shown and edited. The truth underneath is always additive: 0 = attend, -inf = blocked.
enum class MaskConvention { torch_bool, keep, additive };

const char* to_string(MaskPreset p);
const char* to_string(MaskScope s);
const char* to_string(MaskConvention c);

// The preset's knobs; each preset reads only its own.
struct MaskPresetParams {
  int window = 2;         // sliding_window: key j visible from query i when i - w < j <= i
  int segments = 2;       // block_diagonal: equal segments attend within themselves
  int prefix = 2;         // prefix_lm: the first `prefix` keys are visible to all queries
  float random_p = 0.3f;  // random: each cell blocked with probability p
  std::uint64_t random_seed = 1;
};

// The additive value of a blocked cell, and the test for it (only -inf blocks; finite values bias).
inline constexpr float kMaskBlocked = -std::numeric_limits<float>::infinity();
inline bool is_blocked(float additive) {
  return additive == kMaskBlocked;
}

// The mask's dimensions for a scope before torch merges N and H: (L, S), (N, L, S) or (N, H, L, S);
// and their names, for messages. Sizes are taken as given (callers clamp negatives).
Shape mask_scope_dims(MaskScope scope, std::int64_t N, std::int64_t H, std::int64_t L, std::int64_t S);
const char* mask_scope_dims_text(MaskScope scope);
// The attn_mask shape torch takes for a scope: (L, S), (N, L, S) (per-batch layout) or (N·H, L, S).
Shape attn_mask_shape(MaskScope scope, std::int64_t N, std::int64_t H, std::int64_t L, std::int64_t S);
// Which (L, S) slice of such a mask applies to batch item n, head h.
std::int64_t mask_slice(MaskScope scope, std::int64_t n, std::int64_t h, std::int64_t H);

// Whether a deterministic preset (causal, sliding_window, block_diagonal, prefix_lm) blocks query i
// from key j of an (L, S) mask. Others block nothing.
bool preset_blocks(MaskPreset preset, const MaskPresetParams& p, std::int64_t i, std::int64_t j,
                   std::int64_t L, std::int64_t S);
// The additive cells a named attn_mask preset gives for `shape` ((L, S) or (slices, L, S)): every
// slice the same, except random, which draws each cell from random_seed (the same on every platform).
std::vector<float> preset_cells(MaskPreset preset, const MaskPresetParams& p, const Shape& shape);
// The padding preset's (N, S) key_padding_mask, 1 = padding: batch item n has max(1, S - n) valid keys.
std::vector<std::uint8_t> padding_preset(std::int64_t N, std::int64_t S);

// Additive cells of `shape` as the attn_mask torch is given in `convention`: additive as a float
// mask; torch_bool as True = blocked; keep as 1 = attend, converted by mask_from_keep. Cells holding
// finite non-zero values make it additive whatever the convention: a bool mask cannot hold them.
Mask<float> mask_from_additive(const Shape& shape, const std::vector<float>& cells,
                               MaskConvention convention);
// The same into `out`, reusing its storage where the size fits (an edit converts the mask again).
void mask_from_additive(const Shape& shape, const std::vector<float>& cells, MaskConvention convention,
                        Mask<float>& out);

// Cells as one bit each, where every cell is +0 or -inf bit for bit (a -0 or a NaN is not): bit i of
// word i / 64 set when cell i is -inf. What the app keeps beside the mask it edits (the state a
// forward computes, each undo step): 1/32 of the floats. pack_blocked returns false, its bits then
// unusable, when some cell is neither; `blocked` holds (n + 63) / 64 words.
bool pack_blocked(const float* cells, std::size_t n, std::uint64_t* blocked);
// The n cells back from their bits: `blocked_value` where a bit is set, `open_value` elsewhere.
void unpack_blocked(const std::uint64_t* blocked, std::size_t n, float blocked_value, float open_value,
                    float* out);
// mask_from_additive for cells held as bits, into `out` (its storage reused where the size fits): a
// mask held as bits too (Mask::blocked), of the dtype mask_from_additive gives.
void mask_from_blocked(const Shape& shape, const std::vector<std::uint64_t>& blocked,
                       MaskConvention convention, Mask<float>& out);

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

// Both masks validated against `d` (the constructor throws ShapeError / DtypeError with torch's
// reasons and the expected shapes), merged a row at a time on request: what merge_masks does for
// the whole mask, and a mask edit for the rows it compares. Reads the masks it was given, which
// must outlive it.
template <class T>
class MaskMerger {
 public:
  MaskMerger(const Dims& d, const std::optional<Mask<T>>& attn_mask,
             const std::optional<Mask<T>>& key_padding_mask, MaskLayout layout,
             std::vector<std::string>* warnings);
  bool any() const { return am_ || am_bits_ || kpm_; }  // false: neither mask was given
  // The merged mask's broadcast sizes, values empty.
  MergedMask<T> shape() const { return shape_; }
  // Merged row (n, h, i) of the broadcast shape (each index 0 where that size is 1): s_size values.
  void row(std::int64_t n, std::int64_t h, std::int64_t i, T* out) const;
  // Every row, into `values` (resized; its capacity is reused).
  void merge_into(std::vector<T>& values) const;

 private:
  MergedMask<T> shape_;
  std::int64_t S_ = 0;     // the masks' own key count (S_total less the bias_k and zero columns)
  const T* am_ = nullptr;  // attn_mask values: (am_n_, am_h_, L, S)
  const std::uint64_t* am_bits_ = nullptr;  // or its cells as bits (Mask::blocked)
  std::int64_t am_n_ = 1, am_h_ = 1;
  bool am_bool_ = true;
  const T* kpm_ = nullptr;  // key_padding_mask values: (kpm_n_, S)
  std::int64_t kpm_n_ = 1;
  bool kpm_bool_ = true;
};

// Validates both masks against `d` and merges them; nullopt when neither is given.
// Throws ShapeError / DtypeError with torch's reasons and the expected shapes.
template <class T>
std::optional<MergedMask<T>> merge_masks(const Dims& d, const std::optional<Mask<T>>& attn_mask,
                                         const std::optional<Mask<T>>& key_padding_mask, MaskLayout layout,
                                         std::vector<std::string>* warnings);

}  // namespace mha
