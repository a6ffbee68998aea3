// What each head of a model does, measured: previous-token, first-token (sink), induction and
// duplicate-token scores and mean entropy, on fixed probes (docs/model-roles.md gives the
// definitions). The scores of one head's weights are plain functions, so hand-made patterns test them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt2.hpp"
#include "tokenizer/bpe.hpp"

namespace mha {

// One head's weights (T, T), row i = query position, causal or not. Each score is a mean over
// the rows it names; a row set that is empty scores 0.
double prev_token_score(const float* w, std::int64_t T);   // mean_{i≥1} w[i][i-1]
double first_token_score(const float* w, std::int64_t T);  // mean_{i≥1} w[i][0]
double mean_entropy(const float* w, std::int64_t T);       // mean_{i≥1} -Σ_j w[i][j]·ln w[i][j], nats
// On x = r + r with |r| = R (T = 2R): mean_{R≤i<2R} w[i][i-R+1], the token after the earlier copy.
double induction_score(const float* w, std::int64_t T, std::int64_t R);
// The same rows: mean_{R≤i<2R} w[i][i-R], the earlier copy of the current token.
double duplicate_token_score(const float* w, std::int64_t T, std::int64_t R);

struct HeadRole {
  double prev_token = 0, first_token = 0, induction = 0, duplicate_token = 0, entropy = 0;
};

// The role a head is tagged with in the app and the CLI ("prev-token 0.83"), or "" when no score
// stands out: the largest of the four scores that passes its threshold.
std::string role_tag(const HeadRole& r);

struct RoleTable {
  std::int64_t n_layer = 0, n_head = 0;
  std::vector<HeadRole> heads;  // (n_layer, n_head), layer-major
  const HeadRole& at(std::int64_t layer, std::int64_t head) const {
    return heads[std::size_t(layer * n_head + head)];
  }
};

// The probes: eight ordinary English sentences for prev-token, first-token and entropy; eight
// random sequences repeated twice (R = 20 ids each, from a fixed hash, never the last id, which is
// <|endoftext|> in GPT-2's vocabularies) for induction and duplicate-token.
const std::vector<std::string>& role_probe_sentences();
std::vector<std::vector<std::int32_t>> role_probe_repeats(std::int64_t vocab_size);

RoleTable head_roles(const GPT2Model& m, const BpeTokenizer& tokenizer);

// The table as text: one row per head with the five scores and the tag.
std::string format_role_table(const RoleTable& t);

}  // namespace mha
