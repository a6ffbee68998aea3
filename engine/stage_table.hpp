// The trace's stages as one table: every stage a forward can trace, in trace order, with the lane the
// Pipeline draws it in, the operation on the arrow into it, whether the Heads and Compare views offer
// it, whether Left / Right step through it, the cost-model row that counts its FLOPs and a one-line
// note. The trace is assembled under these names; the views, the arrow keys and the `?` overlay read
// the rest from here, so a new stage is one row.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cost.hpp"

namespace mha {

// The stages' names: the trace's, the .npy files' of `mha compute --out`, the views'.
namespace stage_name {
inline constexpr char query[] = "query";
inline constexpr char key[] = "key";
inline constexpr char value[] = "value";
inline constexpr char q[] = "q";
inline constexpr char k[] = "k";
inline constexpr char v[] = "v";
inline constexpr char q_rot[] = "q_rot";
inline constexpr char k_rot[] = "k_rot";
inline constexpr char q_view[] = "q_view";
inline constexpr char k_view[] = "k_view";
inline constexpr char v_view[] = "v_view";
inline constexpr char q_heads[] = "q_heads";
inline constexpr char k_heads[] = "k_heads";
inline constexpr char v_heads[] = "v_heads";
inline constexpr char scores[] = "scores";
inline constexpr char scores_scaled[] = "scores_scaled";
inline constexpr char attn_mask[] = "attn_mask";
inline constexpr char scores_masked[] = "scores_masked";
inline constexpr char attn_weights[] = "attn_weights";
inline constexpr char context[] = "context";
inline constexpr char context_transposed[] = "context_transposed";
inline constexpr char concat[] = "concat";
inline constexpr char output[] = "output";
inline constexpr char attn_weights_avg[] = "attn_weights_avg";
}  // namespace stage_name

// The Pipeline's rows: the query's, the key's and the value's lanes, then the chain they join into.
enum class StageLane { query, key, value, joined };

struct StageInfo {
  const char* name;
  StageLane lane;
  const char* op;  // the operation on the Pipeline's arrow into the stage ("F.linear", "view"); "": none
  // A per-head (N, H, L, S') or (N, H, L, d_k) stage the Heads and Compare views offer: their combo's
  // label (ASCII: the font may lack maths glyphs). nullptr: not offered there.
  const char* head_label;
  bool arrow_keys;  // Left / Right step through it in the views other than the Pipeline
  // The cost model's row (cost::stages()) that counts the FLOPs making it. None: a view, the merged
  // mask (an input; its elements are counted in mask_add) and RoPE, which the cost model leaves out.
  std::optional<cost::Stage> cost;
  // What it is, one line. Where it depends on the forward (RoPE, GQA, the what-if, fully masked rows)
  // the trace's Stage::note says it for that forward; this is the plain module's.
  const char* note;
};

// Every stage, in trace order (attn_mask only with a mask, q_rot and k_rot only with
// Inputs::rotary).
const std::vector<StageInfo>& stage_table();
// The row named `name`; nullptr for a name the table lacks.
const StageInfo* stage_info(const std::string& name);
// The rows the Heads and Compare views offer (head_label set), in trace order.
const std::vector<const StageInfo*>& head_stages();
// The names Left / Right step through in the views other than the Pipeline, in trace order.
const std::vector<std::string>& arrow_key_stages();

}  // namespace mha
