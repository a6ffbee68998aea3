// Head-role scores: each a mean of attention weights at positions that a role would attend to,
// averaged over fixed probes run through the model's own forward.
#include "model/roles.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

namespace mha {

namespace {

constexpr std::int64_t kRepeatLength = 20;  // R
constexpr std::int64_t kRepeatCount = 8;

template <class F>
double mean_rows(std::int64_t begin, std::int64_t end, const F& f) {
  if (end <= begin) return 0;
  double sum = 0;
  for (std::int64_t i = begin; i < end; ++i) sum += f(i);
  return sum / double(end - begin);
}

// Layer l's weights of the run, (H, T, T), as one contiguous block.
std::vector<float> layer_weights(const ModelRun& run, std::int64_t l) {
  return run.attn[std::size_t(l)].trace["attn_weights"].contiguous().data;
}

}  // namespace

double prev_token_score(const float* w, std::int64_t T) {
  return mean_rows(1, T, [&](std::int64_t i) { return double(w[i * T + i - 1]); });
}

double first_token_score(const float* w, std::int64_t T) {
  return mean_rows(1, T, [&](std::int64_t i) { return double(w[i * T]); });
}

double mean_entropy(const float* w, std::int64_t T) {
  return mean_rows(1, T, [&](std::int64_t i) {
    double h = 0;
    for (std::int64_t j = 0; j < T; ++j) {
      const double p = w[i * T + j];
      if (p > 0) h -= p * std::log(p);
    }
    return h;
  });
}

double induction_score(const float* w, std::int64_t T, std::int64_t R) {
  return mean_rows(R, std::min(2 * R, T), [&](std::int64_t i) { return double(w[i * T + i - R + 1]); });
}

double duplicate_token_score(const float* w, std::int64_t T, std::int64_t R) {
  return mean_rows(R, std::min(2 * R, T), [&](std::int64_t i) { return double(w[i * T + i - R]); });
}

SentenceRole sentence_role(const float* w, std::int64_t T, const std::int32_t* ids) {
  SentenceRole r;
  r.prev_token = prev_token_score(w, T);
  r.first_token = first_token_score(w, T);
  double induction = 0, duplicate = 0;
  for (std::int64_t i = 1; i < T; ++i) {
    bool repeat = false;
    double ind = 0, dup = 0;
    for (std::int64_t j = 0; j < i; ++j)
      if (ids[j] == ids[i]) {
        repeat = true;
        dup += w[i * T + j];
        ind += w[i * T + j + 1];  // j + 1 ≤ i: the token after the earlier copy (itself when adjacent)
      }
    if (!repeat) continue;
    ++r.repeat_rows;
    induction += ind;
    duplicate += dup;
  }
  if (r.repeat_rows > 0) {
    r.induction = induction / double(r.repeat_rows);
    r.duplicate_token = duplicate / double(r.repeat_rows);
  }
  return r;
}

namespace {

struct Candidate {
  const char* name;
  double score, threshold;
};

// The largest score that passes its threshold, as "name 0.83", or "".
template <std::size_t N>
std::string best_tag(const Candidate (&c)[N]) {
  const Candidate* best = nullptr;
  for (const Candidate& k : c)
    if (k.score >= k.threshold && (!best || k.score > best->score)) best = &k;
  if (!best) return "";
  char text[48];
  std::snprintf(text, sizeof text, "%s %.2f", best->name, best->score);
  return text;
}

}  // namespace

std::string role_tag(const HeadRole& r) {
  const Candidate c[] = {{"prev-token", r.prev_token, 0.4},
                         {"induction", r.induction, 0.3},
                         {"duplicate", r.duplicate_token, 0.3},
                         {"first-token", r.first_token, 0.5}};
  return best_tag(c);
}

std::string role_tag(const SentenceRole& r) {
  const Candidate c[] = {{"prev-token", r.prev_token, 0.4},
                         {"induction", r.induction.value_or(0), 0.3},
                         {"duplicate", r.duplicate_token.value_or(0), 0.3},
                         {"first-token", r.first_token, 0.5}};
  return best_tag(c);
}

const std::vector<std::string>& role_probe_sentences() {
  static const std::vector<std::string> sentences = {
      "The cat sat on the mat and looked at the door.",
      "When Mary and John went to the store, John gave a drink to Mary.",
      "A journey of a thousand miles begins with a single step.",
      "The quick brown fox jumps over the lazy dog.",
      "I think that the answer to the question is in the book on the table.",
      "She said that she would come back tomorrow, but she never did.",
      "Time flies like an arrow; fruit flies like a banana.",
      "Every morning the old man walked to the river and watched the boats."};
  return sentences;
}

std::vector<std::vector<std::int32_t>> role_probe_repeats(std::int64_t vocab_size) {
  std::vector<std::vector<std::int32_t>> out;
  for (std::int64_t s = 0; s < kRepeatCount; ++s) {
    std::vector<std::int32_t> r;
    for (std::int64_t p = 0; p < kRepeatLength; ++p) {
      const std::uint64_t h = (std::uint64_t(s * kRepeatLength + p + 1) * 2654435761ull) % 4294967296ull;
      r.push_back(std::int32_t(h % std::uint64_t(vocab_size - 1)));
    }
    std::vector<std::int32_t> x = r;
    x.insert(x.end(), r.begin(), r.end());
    out.push_back(std::move(x));
  }
  return out;
}

RoleTable head_roles(const LanguageModel& m, const BpeTokenizer& tokenizer) {
  const ModelSizes c = m.sizes();
  RoleTable t;
  t.n_layer = c.n_layer;
  t.n_head = c.n_head;
  t.heads.assign(std::size_t(c.n_layer * c.n_head), HeadRole{});
  std::unique_ptr<ModelRun> run = m.new_run();
  ModelOptions o;
  o.top_k = 0;
  // Adds score(head's weights, T) / count to every head's field, for one probe sequence.
  auto add = [&](const std::vector<std::int32_t>& ids, double count,
                 const std::function<void(HeadRole&, const float*, std::int64_t, double)>& score) {
    const std::int64_t T = std::int64_t(ids.size());
    m.forward(ids, o, *run);
    for (std::int64_t l = 0; l < c.n_layer; ++l) {
      const std::vector<float> w = layer_weights(*run, l);
      for (std::int64_t h = 0; h < c.n_head; ++h)
        score(t.heads[std::size_t(l * c.n_head + h)], w.data() + h * T * T, T, count);
    }
  };
  const std::vector<std::string>& sentences = role_probe_sentences();
  for (const std::string& text : sentences) {
    std::vector<std::int32_t> ids = tokenizer.encode(text);
    if (std::int64_t(ids.size()) > c.max_positions) ids.resize(std::size_t(c.max_positions));
    add(ids, double(sentences.size()), [](HeadRole& r, const float* w, std::int64_t T, double n) {
      r.prev_token += prev_token_score(w, T) / n;
      r.first_token += first_token_score(w, T) / n;
      r.entropy += mean_entropy(w, T) / n;
    });
  }
  if (2 * kRepeatLength <= c.max_positions) {
    const auto repeats = role_probe_repeats(c.vocab_size);
    for (const std::vector<std::int32_t>& ids : repeats)
      add(ids, double(repeats.size()), [](HeadRole& r, const float* w, std::int64_t T, double n) {
        r.induction += induction_score(w, T, kRepeatLength) / n;
        r.duplicate_token += duplicate_token_score(w, T, kRepeatLength) / n;
      });
  }
  return t;
}

std::string format_role_table(const RoleTable& t) {
  std::string out = "layer head  prev-token  first-token  induction  duplicate  entropy  role\n";
  for (std::int64_t l = 0; l < t.n_layer; ++l)
    for (std::int64_t h = 0; h < t.n_head; ++h) {
      const HeadRole& r = t.at(l, h);
      char line[160];
      std::snprintf(line, sizeof line, "%5lld %4lld  %10.3f  %11.3f  %9.3f  %9.3f  %7.3f  %s\n", (long long)l,
                    (long long)h, r.prev_token, r.first_token, r.induction, r.duplicate_token, r.entropy,
                    role_tag(r).c_str());
      out += line;
    }
  return out;
}

std::vector<SentenceRole> sentence_roles(const LanguageModel& m, const std::vector<std::int32_t>& ids) {
  ModelOptions o;
  o.top_k = 0;
  const std::unique_ptr<ModelRun> run = m.forward(ids, o);
  const std::int64_t T = std::int64_t(ids.size());
  const ModelSizes c = m.sizes();
  std::vector<SentenceRole> out;
  for (std::int64_t l = 0; l < c.n_layer; ++l) {
    const std::vector<float> w = layer_weights(*run, l);  // (H, T, T)
    for (std::int64_t h = 0; h < c.n_head; ++h)
      out.push_back(sentence_role(w.data() + h * T * T, T, ids.data()));
  }
  return out;
}

std::string format_sentence_roles(const std::vector<SentenceRole>& roles, std::int64_t n_head) {
  std::string out = "layer head  prev-token  first-token  induction  duplicate  role (this text)\n";
  for (std::size_t k = 0; k < roles.size(); ++k) {
    const SentenceRole& r = roles[k];
    char ind[16] = "        -", dup[16] = "        -";
    if (r.induction) std::snprintf(ind, sizeof ind, "%9.3f", *r.induction);
    if (r.duplicate_token) std::snprintf(dup, sizeof dup, "%9.3f", *r.duplicate_token);
    char line[160];
    std::snprintf(line, sizeof line, "%5lld %4lld  %10.3f  %11.3f  %s  %s  %s\n", (long long)(std::int64_t(k) / n_head),
                  (long long)(std::int64_t(k) % n_head), r.prev_token, r.first_token, ind, dup, role_tag(r).c_str());
    out += line;
  }
  return out;
}

CopyScore copy_accuracy(const LanguageModel& m, const BpeTokenizer& tokenizer,
                        const std::vector<std::string>& sentences) {
  const ModelSizes c = m.sizes();
  std::unique_ptr<ModelRun> run = m.new_run();
  ModelOptions o;
  o.top_k = 0;
  CopyScore score;
  double hits = 0, p_sum = 0;
  for (const std::string& s : sentences) {
    const std::int64_t n1 = std::int64_t(tokenizer.encode(s).size());
    std::vector<std::int32_t> ids = tokenizer.encode(s + " " + s);
    if (std::int64_t(ids.size()) > c.max_positions)
      throw ConfigError("sentences", "\"" + s + "\" repeated is " + std::to_string(ids.size()) +
                                         " tokens; the model takes at most " + c.max_positions_field + " = " +
                                         std::to_string(c.max_positions));
    m.forward(ids, o, *run);
    std::int64_t sentence_hits = 0, n = 0;
    std::vector<double> logits;
    for (std::int64_t i = n1; i + 1 < std::int64_t(ids.size()); ++i, ++n) {
      m.logits_at(*run, i, logits);
      const auto best = std::max_element(logits.begin(), logits.end());
      double denom = 0;
      for (double z : logits) denom += std::exp(z - *best);
      const std::int32_t next = ids[std::size_t(i + 1)];
      sentence_hits += std::int64_t(best - logits.begin()) == next;
      p_sum += std::exp(logits[std::size_t(next)] - *best) / denom;
    }
    hits += double(sentence_hits);
    score.positions += n;
    score.per_sentence_top1.push_back(n > 0 ? double(sentence_hits) / double(n) : 0.0);
    score.per_sentence_positions.push_back(n);
  }
  if (score.positions > 0) {
    score.top1 = hits / double(score.positions);
    score.mean_probability = p_sum / double(score.positions);
  }
  return score;
}

}  // namespace mha
