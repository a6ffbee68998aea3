// What each head of a model does, measured: previous-token, first-token (sink), induction and
// duplicate-token scores and mean entropy, on fixed probes (docs/model-roles.md gives the
// definitions). The scores of one head's weights are plain functions, so hand-made patterns test them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/language_model.hpp"
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

// The same roles measured on one sentence, the one on screen (TransformerLens's definitions applied
// to its tokens): previous-token and first-token mass over rows i ≥ 1; and, over the rows whose
// token occurred earlier, the mass on the tokens right after its earlier occurrences (induction) and
// on the earlier occurrences themselves (duplicate-token). A sentence with no repeated token has no
// such rows: those two stay empty rather than 0, since the sentence shows nothing either way.
struct SentenceRole {
  double prev_token = 0, first_token = 0;
  std::optional<double> induction, duplicate_token;
  std::int64_t repeat_rows = 0;  // rows whose token occurred earlier
};
// w: one head's weights (T, T); ids: the T tokens of the query (= key) sequence.
SentenceRole sentence_role(const float* w, std::int64_t T, const std::int32_t* ids);
// "prev-token 0.93" as role_tag, from the sentence's scores.
std::string role_tag(const SentenceRole& r);

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

RoleTable head_roles(const LanguageModel& m, const BpeTokenizer& tokenizer);

// The table as text: one row per head with the five scores and the tag.
std::string format_role_table(const RoleTable& t);

// Every head of every layer on one sentence (n_layer·n_head, layer-major), and as text.
std::vector<SentenceRole> sentence_roles(const LanguageModel& m, const std::vector<std::int32_t>& ids);
std::string format_sentence_roles(const std::vector<SentenceRole>& roles, std::int64_t n_head);

// How well a model copies: each sentence s is fed as s + " " + s, and of the positions inside the
// second copy (the one before it, whose next token cannot be known, is not counted) the fraction
// whose most probable next token is the one that follows. Pooled over every sentence's positions.
struct CopyScore {
  double top1 = 0;              // fraction of positions, pooled
  double mean_probability = 0;  // the probability given to the token that follows, mean over positions
  std::int64_t positions = 0;
  std::vector<double> per_sentence_top1;
  std::vector<std::int64_t> per_sentence_positions;
};
CopyScore copy_accuracy(const LanguageModel& m, const BpeTokenizer& tokenizer,
                        const std::vector<std::string>& sentences);

}  // namespace mha
