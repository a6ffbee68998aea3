#include "stage_table.hpp"

namespace mha {

const std::vector<StageInfo>& stage_table() {
  namespace n = stage_name;
  using L = StageLane;
  using C = cost::Stage;
  constexpr std::nullopt_t none = std::nullopt;
  // name, lane, arrow's operation, Heads / Compare label, Left / Right, cost row, note
  static const std::vector<StageInfo> table = {
      {n::query, L::query, "", nullptr, false, C::inputs, "input, batch-first"},
      {n::key, L::key, "", nullptr, false, C::inputs, "input, batch-first"},
      {n::value, L::value, "", nullptr, false, C::inputs, "input, batch-first"},
      {n::q, L::query, "F.linear", nullptr, true, C::q_proj, "in-projection: W_q = in_proj_weight[:E]"},
      {n::k, L::key, "F.linear", nullptr, true, C::k_proj, "in-projection: W_k = in_proj_weight[E:E+G·d_k]"},
      {n::v, L::value, "F.linear", nullptr, true, C::v_proj, "in-projection: W_v = in_proj_weight[E+G·d_k:]"},
      {n::q_rot, L::query, "RoPE", nullptr, false, none,
       "RoPE: each head's q at position i turned by angles i·θ_c; q_i·k_j then depends on i - j"},
      {n::k_rot, L::key, "RoPE", nullptr, false, none,
       "RoPE: each key head at position j turned by angles j·θ_c"},
      {n::q_view, L::query, "view", nullptr, false, none,
       "a view of q (q_rot with RoPE): same storage, contiguous; head h owns columns h·d_k … (h+1)·d_k-1"},
      {n::k_view, L::key, "view", nullptr, false, none,
       "a view of k (k_rot with RoPE): same storage, contiguous"},
      {n::v_view, L::value, "view", nullptr, false, none, "a view of v: same storage, contiguous"},
      {n::q_heads, L::query, "transpose", nullptr, false, none,
       "a view of q (q_rot with RoPE): non-contiguous (only strides swap), so .view() on it fails until "
       ".contiguous()"},
      {n::k_heads, L::key, "transpose", nullptr, false, none,
       "a view of k (k_rot with RoPE): non-contiguous"},
      {n::v_heads, L::value, "transpose", nullptr, false, none, "a view of v: non-contiguous"},
      {n::scores, L::joined, "q @ k^T", "scores  (q . k)", true, C::scores,
       "raw dot products q_i·k_j per head: O(L·S·d_k) each"},
      {n::scores_scaled, L::joined, "/ sqrt(d_k)", "scores_scaled  (/ sqrt(d_k))", true, C::scale,
       "÷√d_k keeps the softmax out of saturation; torch scales q before the product"},
      // The merged mask is an input, drawn in the chain just before the scores it is added to.
      {n::attn_mask, L::joined, "attn_mask merged", nullptr, false, none,
       "additive; broadcast (stride 0) where one mask serves every batch item, head or query"},
      {n::scores_masked, L::joined, "+ attn_mask", "scores_masked  (+ mask)", true, C::mask_add,
       "-inf where a key is blocked"},
      {n::attn_weights, L::joined, "softmax", "attn_weights  (softmax)", true, C::softmax,
       "each row sums to 1; a row with every key blocked is NaN (torch)"},
      {n::context, L::joined, "@ v", "context  (weights @ V)", true, C::context,
       "per-head context: a weighted mix of values"},
      {n::context_transposed, L::joined, "transpose", nullptr, false, none,
       "a view of context: non-contiguous"},
      {n::concat, L::joined, "contiguous().view", nullptr, false, C::concat,
       "heads side by side: .contiguous() copies, then .view() is legal"},
      {n::output, L::joined, "out_proj", nullptr, true, C::out_proj, "out-projection mixes the heads"},
      {n::attn_weights_avg, L::joined, "mean(dim=1)", nullptr, false, C::average,
       "what need_weights=True returns by default (average_attn_weights)"},
  };
  return table;
}

const StageInfo* stage_info(const std::string& name) {
  for (const StageInfo& s : stage_table())
    if (name == s.name) return &s;
  return nullptr;
}

const std::vector<const StageInfo*>& head_stages() {
  static const std::vector<const StageInfo*> rows = [] {
    std::vector<const StageInfo*> out;
    for (const StageInfo& s : stage_table())
      if (s.head_label) out.push_back(&s);
    return out;
  }();
  return rows;
}

const std::vector<std::string>& arrow_key_stages() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const StageInfo& s : stage_table())
      if (s.arrow_keys) out.push_back(s.name);
    return out;
  }();
  return names;
}

}  // namespace mha
