// Language-model checkpoints (GPT-2 and the Llama family) from the command line: the --model options `mha
// compute`, `mha export` and `mha bench` share, `mha compute --model` (a layer's attention trace, or every
// layer's, with the tokens and the next-token top-5) and `mha model-info` (architecture, sizes, tokenizer,
// head roles).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "commands.hpp"
#include "errors.hpp"
#include "io/file_io.hpp"
#include "io/tokenizer_files.hpp"
#include "model/language_model.hpp"
#include "model/roles.hpp"
#include "problem.hpp"
#include "progress.hpp"

namespace fs = std::filesystem;

namespace mha::cli {

namespace {

std::vector<std::int32_t> parse_ids(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      std::size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(std::int32_t(v));
    } catch (const std::exception&) {
      throw ConfigError("--token-ids",
                        "--token-ids: \"" + item + "\" is not a token id (expected e.g. 464,3797,3332)");
    }
  }
  return ids;
}

nlohmann::json top_k_json(const ModelInput& in, const ModelRun& run) {
  nlohmann::json top = nlohmann::json::array();
  for (const TokenProb& t : run.top_k)
    top.push_back({{"id", t.id},
                   {"token", in.tokenizer ? in.tokenizer->display_piece(t.id) : std::to_string(t.id)},
                   {"probability", t.probability}});
  return top;
}

std::string describe(const ModelInput& in, const TokenProb& t) {
  return in.tokenizer ? in.tokenizer->display_piece(t.id) : "#" + std::to_string(t.id);
}

struct ComputeModelArgs {
  ModelArgs model;
  std::string out_dir;
  bool quiet = false;
  const ForwardArgs* what_if = nullptr;  // --temperature, --no-scale
  KnockoutArgs knockout;
};

// --ablate's heads for this model (every other head of each layer named, with --ablate-all-but).
std::vector<HeadRef> knockout_heads(const KnockoutArgs& k, const ModelSizes& c) {
  if (k.heads.empty()) {
    if (k.all_but)
      throw ConfigError("--ablate-all-but", "--ablate-all-but needs --ablate with the heads to keep");
    return {};
  }
  std::vector<HeadRef> heads = parse_heads(k.heads, "--ablate");
  for (const HeadRef& h : heads)
    if (h.layer >= c.n_layer || h.head >= c.n_head)
      throw ConfigError("--ablate", "--ablate " + std::to_string(h.layer) + "." + std::to_string(h.head) +
                                        ": the model has " + std::to_string(c.n_layer) + " layers of " +
                                        std::to_string(c.n_head) + " heads (0.0 to " +
                                        std::to_string(c.n_layer - 1) + "." + std::to_string(c.n_head - 1) +
                                        ")");
  if (!k.all_but) return heads;
  std::vector<HeadRef> out;
  for (std::int64_t l = 0; l < c.n_layer; ++l) {
    std::vector<std::int64_t> keep;
    for (const HeadRef& h : heads)
      if (h.layer == l) keep.push_back(h.head);
    if (keep.empty()) continue;
    for (const HeadRef& h : heads_except(c, l, keep)) out.push_back(h);
  }
  return out;
}

// The top-k before and after a knock-out side by side, then the heads after the first knocked-out
// layer whose pattern moved.
void print_knockout(const ModelInput& in, const std::vector<HeadRef>& heads, Ablation mode,
                    const ModelRun& before, const ModelRun& after) {
  std::printf("\nKNOCK-OUT, a what-if, not torch: head%s %s %s; the layers after follow\n",
              heads.size() > 1 ? "s" : "", format_heads(heads).c_str(),
              mode == Ablation::zero
                  ? "zeroed (context set to 0 before the out-projection)"
                  : "mean-ablated (context replaced by its mean over the sentence's positions)");
  std::printf("next token, top %zu before -> after:\n", after.top_k.size());
  for (std::size_t i = 0; i < std::max(before.top_k.size(), after.top_k.size()); ++i) {
    std::string left, right;
    char buf[96];
    if (i < before.top_k.size()) {
      std::snprintf(buf, sizeof buf, "%-16s %6.2f %%", describe(in, before.top_k[i]).c_str(),
                    100 * before.top_k[i].probability);
      left = buf;
    }
    if (i < after.top_k.size()) {
      std::snprintf(buf, sizeof buf, "%-16s %6.2f %%", describe(in, after.top_k[i]).c_str(),
                    100 * after.top_k[i].probability);
      right = buf;
    }
    std::printf("  %-28s  ->  %s\n", left.c_str(), right.c_str());
  }
  const std::int64_t first = first_knockout_layer(in.loaded.model->sizes(), heads);
  std::string changed;
  std::int64_t later = 0;
  for (const PatternChange& p : pattern_changes(before, after)) {
    if (p.head.layer <= first) continue;
    ++later;
    if (p.max_abs_diff < kPatternChanged) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %lld.%lld  max |dw| %.4f\n", (long long)p.head.layer,
                  (long long)p.head.head, p.max_abs_diff);
    changed += buf;
  }
  if (later == 0)
    std::printf("later layers: none (layer %lld is the last)\n", (long long)first);
  else
    std::printf("heads after layer %lld whose pattern changed (max |dw| >= %g): %s\n%s", (long long)first,
                kPatternChanged, changed.empty() ? "none" : "", changed.c_str());
}

int run_compute(const ComputeModelArgs& a) {
  platform::ProgressLine progress("mha compute", a.quiet);
  const ModelInput in = load_model_input(
      a.model, "all", [&](double f) { progress.fraction(f, "loading " + a.model.model_dir); });
  const LanguageModel& m = *in.loaded.model;
  const ModelSizes c = m.sizes();
  ModelOptions o;
  const double divisor = a.what_if ? what_if_divisor(*a.what_if, c.head_dim) : 0;
  if (divisor > 0) {
    if (in.layers.size() != 1)
      throw ConfigError("--layer",
                        "--temperature and --no-scale apply at one layer of the model (the layers after it "
                        "follow): give --layer 0 to " +
                            std::to_string(c.n_layer - 1));
    o.score_divisors.assign(std::size_t(c.n_layer), 0.0);
    o.score_divisors[std::size_t(in.layers[0])] = divisor;
  }
  const std::vector<HeadRef> knockouts = knockout_heads(a.knockout, c);
  if (a.knockout.mode != "zero" && a.knockout.mode != "mean")
    throw ConfigError("--ablate-mode", "--ablate-mode is zero or mean, got " + a.knockout.mode);
  progress.waiting("forward");
  const std::unique_ptr<ModelRun> run_ptr = m.forward(in.ids, o);
  ModelRun& run = *run_ptr;
  std::unique_ptr<ModelRun> before;
  if (!knockouts.empty()) {
    // The same forward with the knock-outs, recomputed from the first layer they touch.
    before = run.clone();
    o.knockouts = knockouts;
    o.ablation = a.knockout.mode == "mean" ? Ablation::mean : Ablation::zero;
    m.forward_from(run, first_knockout_layer(c, knockouts), o);
  }
  progress.clear();
  std::printf(
      "%s forward (%s: %lld layers, %lld heads%s, n_embd %lld), %zu tokens:\n ", c.family.c_str(),
      in.loaded.folder.c_str(), (long long)c.n_layer, (long long)c.n_head,
      c.n_kv_head < c.n_head ? (" sharing " + std::to_string(c.n_kv_head) + " K/V heads").c_str() : "",
      (long long)c.n_embd, in.ids.size());
  for (const std::string& t : in.tokens) std::printf(" %s", t.c_str());
  if (divisor > 0)
    std::printf(
        "\nWHAT-IF, not torch: layer %lld's q divided by %g instead of sqrt(d_k) = %g; the layers "
        "after it follow",
        (long long)in.layers[0], divisor, std::sqrt(double(c.head_dim)));
  if (before) {
    print_knockout(in, knockouts, o.ablation, *before, run);
  } else {
    std::printf("\nnext token, top %zu:\n", run.top_k.size());
    for (const TokenProb& t : run.top_k)
      std::printf("  %-16s %6.2f %%\n", describe(in, t).c_str(), 100 * t.probability);
  }
  for (const std::string& w : in.loaded.warnings) std::printf("warning: %s\n", w.c_str());
  if (a.out_dir.empty()) return 0;
  const bool all = in.layers.size() > 1;
  // The whole folder at once (see write_folder_atomic): a failure keeps an earlier run's as it was.
  write_folder_atomic(a.out_dir, {"trace.json", "layer_0/trace.json"}, [&](const std::string& staging) {
    for (std::size_t k = 0; k < in.layers.size(); ++k) {
      const std::int64_t l = in.layers[k];
      progress.step(std::int64_t(k), std::int64_t(in.layers.size()), "writing layer " + std::to_string(l));
      const fs::path dir = all ? fs::path(staging) / ("layer_" + std::to_string(l)) : fs::path(staging);
      nlohmann::json meta = write_forward_outputs(dir, run.attn[std::size_t(l)]);
      meta["model"] = in.loaded.folder;
      meta["layer"] = l;
      meta["n_layer"] = c.n_layer;
      meta["family"] = c.model_type;
      meta["tokens"] = in.tokens;
      meta["input_ids"] = in.ids;
      meta["next_token_top_k"] = top_k_json(in, run);
      if (before) {  // what-if, not torch: the stages are the knocked-out forward's
        meta["knockouts"] = format_heads(knockouts);
        meta["ablation"] = to_string(o.ablation);
        meta["next_token_top_k_before_knockouts"] = top_k_json(in, *before);
      }
      write_json_file(dir / "trace.json", meta);
    }
  });
  progress.clear();
  std::printf("wrote %s: %s output.npy, attn_weights.npy (1, H, T, T), trace.json, trace/*.npy\n",
              a.out_dir.c_str(),
              all ? "layer_<i>/ for every layer:" : ("layer " + std::to_string(in.layers[0]) + ":").c_str());
  return 0;
}

struct ModelInfoArgs {
  std::string folder;
  bool roles = false;
  std::string text;       // with --roles: also the roles measured on this text
  std::string copy_file;  // sentences, one a line, for the copy accuracy
};

std::vector<std::string> read_sentences(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw FileError(path, "cannot read " + path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && line[0] != '#') out.push_back(line);
  }
  if (out.empty()) throw ConfigError("--copy", path + " holds no sentence (one a line; # starts a comment)");
  return out;
}

int run_model_info(const ModelInfoArgs& a) {
  const std::string& folder = a.folder;
  const bool roles = a.roles;
  const auto t0 = std::chrono::steady_clock::now();
  const LoadedModel loaded = load_model(folder);
  const double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const LanguageModel& m = *loaded.model;
  const ModelSizes c = m.sizes();
  std::printf("%s\n", folder.c_str());
  std::printf("  family         %s (model_type %s)\n", c.family.c_str(), c.model_type.c_str());
  std::printf("  architecture   %s\n", c.architecture.c_str());
  std::printf("  layers         %lld\n", (long long)c.n_layer);
  if (c.n_kv_head < c.n_head)
    std::printf(
        "  heads          %lld query heads in %lld groups: each K/V head is read by %lld query heads "
        "(grouped-query attention; head_dim %lld)\n",
        (long long)c.n_head, (long long)c.n_kv_head, (long long)c.kv_group(), (long long)c.head_dim);
  else
    std::printf("  heads          %lld (head_dim %lld)\n", (long long)c.n_head, (long long)c.head_dim);
  std::printf("  n_embd         %lld\n  MLP width      %lld\n  max positions  %lld\n  vocab_size     %lld\n",
              (long long)c.n_embd, (long long)c.n_inner, (long long)c.max_positions, (long long)c.vocab_size);
  if (c.rotary)
    std::printf("  positions      rotary (RoPE), rope_theta %g%s%s\n", c.rope_theta,
                c.rope_scaling.empty() ? "" : ", rope_scaling ", c.rope_scaling.c_str());
  else
    std::printf("  positions      learned absolute (wpe)\n");
  if (c.sliding_window > 0) std::printf("  sliding window %lld keys\n", (long long)c.sliding_window);
  std::printf("  lm_head        %s\n",
              c.tied_head ? "tied to the token embedding" : "untied (lm_head.weight)");
  std::printf("  parameters     %lld\n  dtype          %s (computed in float32)\n",
              (long long)c.parameter_count, c.storage_dtype.c_str());
  for (const std::string& f : loaded.weight_files) std::printf("  weights        %s\n", f.c_str());
  std::optional<BpeTokenizer> tok;
  try {
    tok = load_tokenizer(folder);
    std::printf("  tokenizer      %s\n", tok->describe().c_str());
  } catch (const Error& e) {
    std::printf("  tokenizer      none (%s): use --token-ids\n", e.what());
  }
  std::printf("  load time      %.0f ms\n", load_ms);
  for (const std::string& w : loaded.warnings) std::printf("warning: %s\n", w.c_str());
  if (!roles && a.copy_file.empty()) return 0;
  if (!tok)
    throw ConfigError(roles ? "--roles" : "--copy",
                      "--roles and --copy run text through the model's tokenizer; the folder has none");
  if (roles) {
    const RoleTable table = head_roles(m, *tok);
    std::printf("\nroles on the probes:\n%s", format_role_table(table).c_str());
    if (!a.text.empty()) {
      const std::vector<std::int32_t> ids = tok->encode(a.text);
      if (ids.empty() || std::int64_t(ids.size()) > c.max_positions)
        throw ConfigError("--text", "the text has " + std::to_string(ids.size()) + " tokens; give 1 to " +
                                        std::to_string(c.max_positions));
      std::printf("\nroles on this text (%zu tokens):\n%s", ids.size(),
                  format_sentence_roles(sentence_roles(m, ids), c.n_head).c_str());
    }
  }
  if (!a.copy_file.empty()) {
    const std::vector<std::string> sentences = read_sentences(a.copy_file);
    const CopyScore cs = copy_accuracy(m, *tok, sentences);
    std::printf("\ncopy accuracy on %zu sentences, each fed as s + \" \" + s: top-1 %.3f of %lld positions in the "
                "second copies, mean probability of the next token %.3f\n",
                sentences.size(), cs.top1, (long long)cs.positions, cs.mean_probability);
    for (std::size_t i = 0; i < sentences.size(); ++i)
      std::printf("  %.2f (%lld) %s\n", cs.per_sentence_top1[i], (long long)cs.per_sentence_positions[i],
                  sentences[i].c_str());
  }
  return 0;
}

}  // namespace

void add_model_options(CLI::App* cmd, ModelArgs& m, const char* layer_help) {
  cmd->add_option("--model", m.model_dir,
                  "A Hugging Face model folder: GPT-2, Llama, Mistral or Qwen2 (config.json, "
                  "model.safetensors or shards, tokenizer.json or vocab.json + merges.txt)");
  cmd->add_option("--text", m.text, "With --model: the text, tokenized by the model's tokenizer");
  cmd->add_option("--token-ids", m.token_ids, "With --model: token ids instead of text, e.g. 464,3797,3332");
  cmd->add_option("--layer", m.layer, layer_help);
}

ModelInput load_model_input(const ModelArgs& a, const char* default_layer, const LoadProgress& progress) {
  if (a.text.empty() == a.token_ids.empty())
    throw ConfigError("--text", "with --model give exactly one of --text \"...\" and --token-ids 1,2,3");
  ModelInput in;
  in.loaded = load_model(a.model_dir, progress);
  const ModelSizes c = in.loaded.model->sizes();
  try {
    in.tokenizer = load_tokenizer(a.model_dir);
  } catch (const Error& e) {
    if (!a.text.empty()) throw ConfigError("--text", std::string(e.what()) + "; give --token-ids instead");
  }
  in.ids = a.text.empty() ? parse_ids(a.token_ids) : in.tokenizer->encode(a.text);
  if (in.ids.empty()) throw ConfigError("--text", "the text has no tokens");
  if (std::int64_t(in.ids.size()) > c.max_positions)
    throw ConfigError("--text", "the text has " + std::to_string(in.ids.size()) +
                                    " tokens; this model takes at most " + c.max_positions_field + " = " +
                                    std::to_string(c.max_positions));
  for (std::size_t i = 0; i < in.ids.size(); ++i) {
    if (in.ids[i] >= c.vocab_size)
      throw ConfigError("--token-ids", "token id " + std::to_string(in.ids[i]) +
                                           " is outside the vocabulary (" + std::to_string(c.vocab_size) +
                                           " tokens)");
    in.tokens.push_back(in.tokenizer ? in.tokenizer->display_piece(in.ids[i]) : std::to_string(in.ids[i]));
  }
  const std::string layer = a.layer.empty() ? default_layer : a.layer;
  if (layer == "all") {
    for (std::int64_t l = 0; l < c.n_layer; ++l) in.layers.push_back(l);
    return in;
  }
  std::int64_t l = -1;
  try {
    std::size_t used = 0;
    l = std::stoll(layer, &used);
    if (used != layer.size()) l = -1;
  } catch (const std::exception&) {
  }
  if (l < 0 || l >= c.n_layer)
    throw ConfigError("--layer", "--layer " + layer + ": the model has " + std::to_string(c.n_layer) +
                                     " layers (0 to " + std::to_string(c.n_layer - 1) + "), or give all");
  in.layers.push_back(l);
  return in;
}

std::function<int()> add_model_info(CLI::App& app) {
  auto a = std::make_shared<ModelInfoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "model-info",
      "A model folder's family, architecture, sizes, grouped-query heads, positions (RoPE), parameter count, "
      "tokenizer and dtype");
  cmd->add_option("folder", a->folder, "The model folder")->required();
  cmd->add_flag(
      "--roles", a->roles,
      "Also each head's role scores: previous-token, first-token (sink), induction, duplicate-token, "
      "mean entropy (docs/model-roles.md defines them)");
  cmd->add_option("--text", a->text, "With --roles: also the scores measured on this text");
  cmd->add_option("--copy", a->copy_file,
                  "A file of sentences, one a line: how often the model's top-1 next token copies the "
                  "second time each is repeated");
  return [a]() { return run_model_info(*a); };
}

int run_model_compute(const ModelArgs& m, const std::string& out_dir, bool quiet, const ForwardArgs& what_if,
                      const KnockoutArgs& knockout) {
  return run_compute({m, out_dir, quiet, &what_if, knockout});
}

void add_knockout_options(CLI::App* cmd, KnockoutArgs& k) {
  cmd->add_option(
      "--ablate", k.heads,
      "With --model: knock heads out, a what-if (not torch): layer.head list, e.g. 1.0,1.3; each "
      "head's context (its slice of concat, before the out-projection) is replaced, the layers "
      "after follow; prints the top-5 before and after and the later heads whose pattern changed");
  cmd->add_option("--ablate-mode", k.mode,
                  "zero (default): the context is 0; mean: the head's mean context over the sentence's "
                  "positions at every position");
  cmd->add_flag("--ablate-all-but", k.all_but,
                "Knock out every head of each layer --ablate names except the heads it lists");
}

}  // namespace mha::cli
