// Mask presets, scopes, conventions, builders and torch's mask merge (multi_head_attention_forward,
// torch 1.13).
#include "masks.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "errors.hpp"

namespace mha {

const char* to_string(MaskPreset p) {
  switch (p) {
    case MaskPreset::none: return "none";
    case MaskPreset::causal: return "causal";
    case MaskPreset::padding: return "padding";
    case MaskPreset::sliding_window: return "sliding_window";
    case MaskPreset::block_diagonal: return "block_diagonal";
    case MaskPreset::prefix_lm: return "prefix_lm";
    case MaskPreset::random: return "random";
    case MaskPreset::custom: return "custom";
  }
  return "none";
}

const char* to_string(MaskScope s) {
  switch (s) {
    case MaskScope::shared: return "shared";
    case MaskScope::per_batch: return "per_batch";
    case MaskScope::per_head: return "per_head";
  }
  return "shared";
}

const char* to_string(MaskConvention c) {
  switch (c) {
    case MaskConvention::torch_bool: return "torch_bool";
    case MaskConvention::keep: return "keep";
    case MaskConvention::additive: return "additive";
  }
  return "torch_bool";
}

Shape mask_scope_dims(MaskScope scope, std::int64_t N, std::int64_t H, std::int64_t L, std::int64_t S) {
  switch (scope) {
    case MaskScope::shared: return {L, S};
    case MaskScope::per_batch: return {N, L, S};
    case MaskScope::per_head: return {N, H, L, S};
  }
  return {L, S};
}

const char* mask_scope_dims_text(MaskScope scope) {
  switch (scope) {
    case MaskScope::shared: return "(L, S)";
    case MaskScope::per_batch: return "(N, L, S)";
    case MaskScope::per_head: return "(N, H, L, S)";
  }
  return "(L, S)";
}

Shape attn_mask_shape(MaskScope scope, std::int64_t N, std::int64_t H, std::int64_t L, std::int64_t S) {
  if (scope == MaskScope::per_head) return {N * H, L, S};  // torch's batch-major, head-minor slices
  return mask_scope_dims(scope, N, H, L, S);
}

std::int64_t mask_slice(MaskScope scope, std::int64_t n, std::int64_t h, std::int64_t H) {
  switch (scope) {
    case MaskScope::shared: return 0;
    case MaskScope::per_batch: return n;
    case MaskScope::per_head: return n * H + h;
  }
  return 0;
}

bool preset_blocks(MaskPreset preset, const MaskPresetParams& p, std::int64_t i, std::int64_t j,
                   std::int64_t L, std::int64_t S) {
  switch (preset) {
    case MaskPreset::causal: return j > i;
    case MaskPreset::sliding_window: return !(i - p.window < j && j <= i);
    case MaskPreset::block_diagonal: {
      const std::int64_t k = std::max(1, p.segments);  // part of i is floor(i·k / L): near-equal, contiguous
      return i * k / L != j * k / S;
    }
    case MaskPreset::prefix_lm: return !(j < p.prefix || j <= i);
    default: return false;
  }
}

namespace {

// u in [0, 1) from the top 53 bits of one draw: the same on every platform, which
// std::uniform_real_distribution does not promise.
double uniform01(std::mt19937_64& g) {
  return double(g() >> 11) * 0x1p-53;
}

}  // namespace

std::vector<float> preset_cells(MaskPreset preset, const MaskPresetParams& p, const Shape& shape) {
  const std::int64_t slices = shape.size() == 3 ? shape[0] : 1;
  const std::int64_t L = shape[shape.size() - 2], S = shape[shape.size() - 1];
  std::vector<float> cells(std::size_t(slices * L * S), 0.0f);
  // No cells (a batch of 0 with a per-batch scope): nothing to draw. Without this the rows of the
  // first slice were written through an empty vector (found by fuzz_scenario under UBSan).
  if (cells.empty()) return cells;
  if (preset == MaskPreset::random) {
    std::mt19937_64 gen(p.random_seed);
    const double prob = p.random_p;
    std::size_t k = 0;
    for (std::int64_t n = 0; n < slices; ++n)
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t j = 0; j < S; ++j, ++k) {
          // The diagonal stays open below p = 1, so a row (i < S) is never fully blocked by chance.
          if (uniform01(gen) < prob && !(i == j && prob < 1)) cells[k] = kMaskBlocked;
        }
    return cells;
  }
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = 0; j < S; ++j)
      if (preset_blocks(preset, p, i, j, L, S)) cells[std::size_t(i * S + j)] = kMaskBlocked;
  for (std::int64_t n = 1; n < slices; ++n)
    std::copy_n(cells.begin(), L * S, cells.begin() + std::ptrdiff_t(n * L * S));
  return cells;
}

std::vector<std::uint8_t> padding_preset(std::int64_t N, std::int64_t S) {
  std::vector<std::uint8_t> kp(std::size_t(N * S), 0);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t j = std::max<std::int64_t>(1, S - n); j < S; ++j) kp[std::size_t(n * S + j)] = 1;
  return kp;
}

void mask_from_additive(const Shape& shape, const std::vector<float>& cells, MaskConvention convention,
                        Mask<float>& out) {
  // Whether some cell holds a finite non-zero value, a block of cells at a time in a loop the
  // compiler vectorises (x - x is 0 for finite x, NaN otherwise): at L = S = 2048 the mask is 4M
  // cells, converted again on every mask edit.
  bool has_values = false;
  for (std::size_t b = 0; b < cells.size() && !has_values; b += 4096) {
    const std::size_t e = std::min(cells.size(), b + 4096);
    unsigned any = 0;
    for (std::size_t i = b; i < e; ++i)
      any |= unsigned(cells[i] != 0.0f) & unsigned(cells[i] - cells[i] == 0.0f);
    has_values = any != 0;
  }
  std::vector<float> values = std::move(out.values.data);  // its storage is reused where it fits
  std::vector<std::uint64_t>().swap(out.blocked);          // held as values, not bits
  if (convention == MaskConvention::additive || has_values) {
    out.dtype = MaskDType::floating;
    values.assign(cells.begin(), cells.end());
  } else {
    // torch bool (True = blocked), and the course's 1 = attend converted by mask_from_keep's rule
    // (blocked = keep == 0): both are the bool mask of the blocked cells.
    out.dtype = MaskDType::boolean;
    values.resize(cells.size());
    for (std::size_t i = 0; i < cells.size(); ++i) values[i] = float(is_blocked(cells[i]));
  }
  out.values = Tensor<float>(shape, std::move(values));
}

namespace {

constexpr std::uint32_t kOpenBits = 0x00000000u, kBlockedBits = 0xff800000u;  // +0 and -inf

// The scalar loops, for the tail words (and the whole where SSE2 is missing).
bool pack_words(const float* cells, std::size_t n, std::uint64_t* blocked) {
  unsigned other = 0;
  for (std::size_t w = 0; w * 64 < n; ++w) {
    std::uint64_t bits = 0;
    for (std::size_t i = w * 64; i < std::min(n, w * 64 + 64); ++i) {
      std::uint32_t b;
      std::memcpy(&b, &cells[i], sizeof b);
      other |= unsigned(b != kOpenBits) & unsigned(b != kBlockedBits);
      bits |= std::uint64_t(b == kBlockedBits) << (i % 64);
    }
    blocked[w] = bits;
  }
  return other == 0;
}

}  // namespace

bool pack_blocked(const float* cells, std::size_t n, std::uint64_t* blocked) {
  std::size_t done = 0;
#if defined(__SSE2__)
  // Four cells a compare: 64 MiB of cells (L = S = 4096) in about 3 ms, half a memcpy of them.
  const __m128i open = _mm_setzero_si128(), blocked_bits = _mm_set1_epi32(int(kBlockedBits));
  __m128i other = _mm_setzero_si128();
  for (; done + 64 <= n; done += 64) {
    std::uint64_t bits = 0;
    for (int k = 0; k < 16; ++k) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(cells + done + 4 * k));
      const __m128i is_blocked = _mm_cmpeq_epi32(x, blocked_bits);
      const __m128i either = _mm_or_si128(is_blocked, _mm_cmpeq_epi32(x, open));
      other = _mm_or_si128(other, _mm_andnot_si128(either, _mm_set1_epi32(-1)));
      bits |= std::uint64_t(_mm_movemask_ps(_mm_castsi128_ps(is_blocked))) << (4 * k);
    }
    blocked[done / 64] = bits;
  }
  if (_mm_movemask_epi8(other) != 0) return false;
#endif
  return pack_words(cells + done, n - done, blocked + done / 64);
}

namespace {

// Cells first .. first + n - 1 of `blocked` as values: `blocked_value` where a bit is set.
template <class T>
void unpack_bits(const std::uint64_t* blocked, std::size_t first, std::size_t n, T blocked_value,
                 T open_value, T* out) {
  auto one = [&](std::size_t i) { return (blocked[i / 64] >> (i % 64)) & 1 ? blocked_value : open_value; };
  std::size_t j = 0;
  for (; j < n && (first + j) % 64 != 0; ++j) out[j] = one(first + j);
  // Whole words, four cells a store from a table of the 16 nibbles.
  T table[16][4];
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 4; ++k) table[m][k] = (m >> k) & 1 ? blocked_value : open_value;
  for (; j + 64 <= n; j += 64) {
    const std::uint64_t bits = blocked[(first + j) / 64];
    for (int k = 0; k < 16; ++k) std::memcpy(out + j + 4 * k, table[(bits >> (4 * k)) & 15], sizeof table[0]);
  }
  for (; j < n; ++j) out[j] = one(first + j);
}

}  // namespace

void unpack_blocked(const std::uint64_t* blocked, std::size_t n, float blocked_value, float open_value,
                    float* out) {
  unpack_bits(blocked, 0, n, blocked_value, open_value, out);
}

void mask_from_blocked(const Shape& shape, const std::vector<std::uint64_t>& blocked,
                       MaskConvention convention, Mask<float>& out) {
  const std::size_t n = std::size_t(numel(shape));
  if (blocked.size() != (n + 63) / 64)
    throw ShapeError("attn_mask", "the mask's bits hold " + std::to_string(blocked.size() * 64) +
                                      " cells but " + shape_str(shape) + " needs " + std::to_string(n));
  // As mask_from_additive converts cells of 0 and -inf: additive keeps them (a floating mask), the
  // other two conventions give torch's bool mask of the blocked cells.
  out.dtype = convention == MaskConvention::additive ? MaskDType::floating : MaskDType::boolean;
  out.values.shape = shape;
  std::vector<float>().swap(out.values.data);          // floats of an earlier use let go
  out.blocked.assign(blocked.begin(), blocked.end());  // its storage is reused where it fits
}

Mask<float> mask_from_additive(const Shape& shape, const std::vector<float>& cells,
                               MaskConvention convention) {
  Mask<float> out;
  mask_from_additive(shape, cells, convention, out);
  return out;
}

template <class T>
Mask<T> mask_from_keep(const Tensor<T>& keep) {
  Mask<T> m;
  m.dtype = MaskDType::boolean;
  m.values = Tensor<T>(keep.shape);
  for (std::size_t i = 0; i < keep.data.size(); ++i) m.values.data[i] = keep.data[i] == T(0) ? 1 : 0;
  return m;
}

template <class T>
Mask<T> causal_mask(std::int64_t L, std::int64_t S) {
  Mask<T> m;
  m.values = Tensor<T>({L, S});
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = i + 1; j < S; ++j) m.values.data[std::size_t(i * S + j)] = 1;
  return m;
}

template <class T>
Mask<T> key_padding_from_lengths(const std::vector<std::int64_t>& valid_lengths, std::int64_t S) {
  Mask<T> m;
  const std::int64_t N = std::int64_t(valid_lengths.size());
  m.values = Tensor<T>({N, S});
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t j = valid_lengths[std::size_t(n)]; j < S; ++j)
      if (j >= 0) m.values.data[std::size_t(n * S + j)] = 1;
  return m;
}

namespace {

std::string expected_attn_mask_shapes(const Dims& d, MaskLayout layout) {
  const std::string two = shape_str({d.L, d.S});
  if (!d.batched) return two + " or " + shape_str({d.H, d.L, d.S});
  if (layout == MaskLayout::per_batch) return two + " or per-batch " + shape_str({d.N, d.L, d.S});
  return two + " or " + shape_str({d.N * d.H, d.L, d.S});
}

}  // namespace

template <class T>
MaskMerger<T>::MaskMerger(const Dims& d, const std::optional<Mask<T>>& attn_mask,
                          const std::optional<Mask<T>>& key_padding_mask, MaskLayout layout,
                          std::vector<std::string>* warnings)
    : S_(d.S) {
  if (!attn_mask && !key_padding_mask) return;
  if (attn_mask) {
    const Shape& sh = attn_mask->values.shape;
    const bool bits = !attn_mask->blocked.empty();
    if (bits && (!attn_mask->values.data.empty() || attn_mask->dtype == MaskDType::uint8 ||
                 attn_mask->blocked.size() != (std::size_t(numel(sh)) + 63) / 64))
      throw ShapeError("attn_mask", "attn_mask: held as bits, it needs " +
                                        std::to_string((numel(sh) + 63) / 64) + " words for its shape " +
                                        shape_str(sh) + ", a bool or float dtype and no values besides");
    if (!bits && attn_mask->values.data.size() != std::size_t(numel(sh)))
      throw ShapeError("attn_mask", "attn_mask: holds " + std::to_string(attn_mask->values.data.size()) +
                                        " values but its shape " + shape_str(sh) + " needs " +
                                        std::to_string(numel(sh)));
    am_bool_ = attn_mask->dtype != MaskDType::floating;
    if (attn_mask->dtype == MaskDType::uint8 && warnings)
      warnings->push_back(
          "Byte tensor for attn_mask in nn.MultiheadAttention is deprecated. Use bool tensor instead.");
    if (sh.size() == 2) {
      if (sh[0] != d.L || sh[1] != d.S)
        throw ShapeError("attn_mask", "attn_mask: the shape of the 2D attn_mask is " + shape_str(sh) +
                                          ", but should be " + shape_str({d.L, d.S}) + " (L, S)");
    } else if (sh.size() == 3) {
      const Shape torch3 = {d.batched ? d.N * d.H : d.H, d.L, d.S};
      const Shape per_batch = {d.N, d.L, d.S};
      if (!d.batched || layout == MaskLayout::torch) {
        if (sh != torch3) {
          std::string msg = "attn_mask: the shape of the 3D attn_mask is " + shape_str(sh) +
                            ", but should be " + shape_str(torch3) +
                            (d.batched ? " (N·num_heads, L, S): one mask per (batch item, head), "
                                         "batch-major, head-minor"
                                       : " (num_heads, L, S)");
          if (d.batched && sh == per_batch)
            msg +=
                ". This mask is (N, L, S), one per batch item, as the course material builds it; "
                "torch rejects that layout. Repeat it for every head "
                "(mask.repeat_interleave(num_heads, dim=0)) or choose the per-batch layout "
                "explicitly (--attn-mask-layout per_batch)";
          throw ShapeError("attn_mask", msg);
        }
        am_n_ = d.batched ? d.N : 1;
        am_h_ = d.H;
      } else {
        if (sh != per_batch) {
          std::string msg = "attn_mask: the per-batch layout wants (N, L, S) = " + shape_str(per_batch) +
                            ", got " + shape_str(sh);
          if (sh == torch3)
            msg += ". That is torch's (N·num_heads, L, S) layout: choose the torch layout for it";
          throw ShapeError("attn_mask", msg);
        }
        am_n_ = d.N;
      }
    } else {
      throw ShapeError("attn_mask", "attn_mask: expected " + expected_attn_mask_shapes(d, layout) +
                                        ", got a " + std::to_string(sh.size()) + "-D tensor " +
                                        shape_str(sh));
    }
    if (bits)
      am_bits_ = attn_mask->blocked.data();
    else
      am_ = attn_mask->values.ptr();
  }

  if (key_padding_mask) {
    const Shape& sh = key_padding_mask->values.shape;
    const Shape want = d.batched ? Shape{d.N, d.S} : Shape{d.S};
    if (key_padding_mask->dtype == MaskDType::uint8)
      throw DtypeError("key_padding_mask",
                       "key_padding_mask: only bool and floating types of key_padding_mask are "
                       "supported (got uint8)");
    if (sh != want || key_padding_mask->values.data.size() != std::size_t(numel(want)))
      throw ShapeError("key_padding_mask", "key_padding_mask: expecting shape " + shape_str(want) +
                                               (d.batched ? " (N, S)" : " (S,)") + ", but got " +
                                               shape_str(sh));
    kpm_bool_ = key_padding_mask->dtype == MaskDType::boolean;
    kpm_n_ = d.N;
    kpm_ = key_padding_mask->values.ptr();
  }

  // torch 1.13 merges a float attn_mask with masked_fill(key_padding_mask, -inf). Given a float
  // key_padding_mask, that call reads each float's lowest byte as the bool: 0.0, 1.0 and -inf all
  // read as False, so the padding is silently ignored, and other values raise "Mask tensor can take
  // 0 and 1 values only" (pytorch#92554). Neither is worth reproducing: refuse, and say why.
  const bool am = am_ || am_bits_;
  if (am && kpm_ && !am_bool_ && !kpm_bool_)
    throw DtypeError("key_padding_mask",
                     "key_padding_mask: a float key_padding_mask cannot be combined with a float "
                     "attn_mask: torch 1.13 merges them with masked_fill, which silently ignores a "
                     "0/1 float key_padding_mask and rejects other values. Use a bool "
                     "key_padding_mask (True = padding), or add the padding into the float attn_mask");
  shape_.n_size = std::max(am ? am_n_ : 1, kpm_ ? kpm_n_ : 1);
  shape_.h_size = am ? am_h_ : 1;
  shape_.l_size = am ? d.L : 1;
  shape_.s_size = d.S_total;
}

template <class T>
void MaskMerger<T>::row(std::int64_t n, std::int64_t h, std::int64_t i, T* o) const {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const std::int64_t S = S_;
  // Rows read straight from the masks, in loops the compiler vectorises (at L = S = 2048 the mask
  // is 4M cells, merged again on every mask edit).
  const std::int64_t am_row = ((am_n_ > 1 ? n : 0) * am_h_ + (am_h_ > 1 ? h : 0)) * shape_.l_size + i;
  const T* a = am_ ? am_ + am_row * S : nullptr;
  const T* k = kpm_ ? kpm_ + (kpm_n_ > 1 ? n : 0) * S : nullptr;
  if (am_bits_) {  // blocked (True, or -inf) or not: either dtype merges to -inf or 0, then the padding
    unpack_bits(am_bits_, std::size_t(am_row * S), std::size_t(S), neg_inf, T(0), o);
    if (k)
      for (std::int64_t j = 0; j < S; ++j) o[j] = k[j] != T(0) ? neg_inf : o[j];
  } else if (a && k && am_bool_) {  // logical_or, then bool -> -inf (a float padding mask reads non-zero)
    for (std::int64_t j = 0; j < S; ++j) o[j] = (a[j] != T(0) || k[j] != T(0)) ? neg_inf : T(0);
  } else if (a && k) {  // masked_fill(key_padding_mask, -inf)
    for (std::int64_t j = 0; j < S; ++j) o[j] = k[j] != T(0) ? neg_inf : a[j];
  } else {
    const T* x = a ? a : k;
    if (a ? am_bool_ : kpm_bool_)
      for (std::int64_t j = 0; j < S; ++j) o[j] = x[j] != T(0) ? neg_inf : T(0);
    else
      std::copy(x, x + S, o);
  }
  // Columns S.. S_total-1 (bias_k row, zero row) are 0 / False: torch pads with pad(mask, (0, 1)).
  std::fill(o + S, o + shape_.s_size, T(0));
}

template <class T>
void MaskMerger<T>::merge_into(std::vector<T>& values) const {
  values.resize(std::size_t(shape_.n_size * shape_.h_size * shape_.l_size * shape_.s_size));
  T* o = values.data();
  for (std::int64_t n = 0; n < shape_.n_size; ++n)
    for (std::int64_t h = 0; h < shape_.h_size; ++h)
      for (std::int64_t i = 0; i < shape_.l_size; ++i, o += shape_.s_size) row(n, h, i, o);
}

template <class T>
std::optional<MergedMask<T>> merge_masks(const Dims& d, const std::optional<Mask<T>>& attn_mask,
                                         const std::optional<Mask<T>>& key_padding_mask, MaskLayout layout,
                                         std::vector<std::string>* warnings) {
  const MaskMerger<T> merger(d, attn_mask, key_padding_mask, layout, warnings);
  if (!merger.any()) return std::nullopt;
  MergedMask<T> out = merger.shape();
  merger.merge_into(out.values);
  return out;
}

#define MHA_INSTANTIATE(T)                                                                         \
  template Mask<T> mask_from_keep<T>(const Tensor<T>&);                                            \
  template Mask<T> causal_mask<T>(std::int64_t, std::int64_t);                                     \
  template Mask<T> key_padding_from_lengths<T>(const std::vector<std::int64_t>&, std::int64_t);    \
  template class MaskMerger<T>;                                                                    \
  template std::optional<MergedMask<T>> merge_masks<T>(const Dims&, const std::optional<Mask<T>>&, \
                                                       const std::optional<Mask<T>>&, MaskLayout,  \
                                                       std::vector<std::string>*);
MHA_INSTANTIATE(float)
MHA_INSTANTIATE(double)
#undef MHA_INSTANTIATE

}  // namespace mha
