// One interface for every language-model family the engine runs (GPT-2, and Llama with Mistral and
// Qwen2): its sizes, a forward that keeps every layer's traced attention and the residual stream, a
// re-run from one layer on (what a what-if at that layer changes), and the what-ifs themselves
// (a mask or a score divisor per layer, head knock-outs). The app, the CLI, the role probes and the
// benchmarks read models only through this; each family's own file (gpt2.hpp, llama.hpp) holds its
// config, weights and the activations only it has.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mha.hpp"

namespace mha {

// One next-token candidate.
struct TokenProb {
  std::int32_t id = 0;
  double probability = 0;  // softmax of the last position's logits
  float logit = 0;
};

// One head of one layer, TransformerLens's (layer, head_index).
struct HeadRef {
  std::int64_t layer = 0, head = 0;
  bool operator==(const HeadRef& o) const { return layer == o.layer && head == o.head; }
  bool operator<(const HeadRef& o) const { return layer < o.layer || (layer == o.layer && head < o.head); }
};

// What a knocked-out head's context becomes (a what-if, not torch: head ablation as TransformerLens
// does it on hook_z). The context is the head's slice of `concat`, (T, d_k): what the head hands to
// the out-projection.
enum class Ablation {
  zero,  // every position's context is 0: the head adds nothing but out_proj.bias's share
  // every position's context is the head's mean context over this sentence's T positions, one (d_k,)
  // vector: the head still adds its average, but nothing that depends on where it looked
  mean,
};
const char* to_string(Ablation a);

// A model's sizes and settings in one vocabulary for every family (the family's config.json names
// in the comments).
struct ModelSizes {
  std::string family;        // "GPT-2" or "Llama"
  std::string model_type;    // config.json's: "gpt2", "llama", "mistral", "qwen2"
  std::string architecture;  // one line: what a block computes
  std::int64_t vocab_size = 0;
  std::int64_t max_positions = 0;   // n_positions / max_position_embeddings
  std::string max_positions_field;  // which of the two config.json calls it
  std::int64_t n_embd = 0;          // C: n_embd / hidden_size
  std::int64_t n_inner = 0;         // MLP width: n_inner (4·C) / intermediate_size
  std::int64_t n_layer = 0;         // n_layer / num_hidden_layers
  std::int64_t n_head = 0;          // H: n_head / num_attention_heads
  std::int64_t n_kv_head = 0;       // G: num_key_value_heads; H without grouped-query attention
  std::int64_t head_dim = 0;        // d_k
  bool rotary = false;              // RoPE on q and k (else learned absolute positions, wpe)
  double rope_theta = 0;
  std::string rope_scaling;               // "" or "linear ×8", "llama3 ×32"
  std::int64_t sliding_window = 0;        // mistral: each query sees this many keys back; 0: all
  bool tied_head = true;                  // the LM head is the token embedding
  std::string storage_dtype = "float32";  // what the checkpoint stored ("float16", "bfloat16", …)
  std::int64_t parameter_count = 0;       // tied head counted once, as Hugging Face counts it

  std::int64_t kv_group() const {
    return n_kv_head > 0 ? n_head / n_kv_head : 1;
  }  // query heads per K/V head
  // The K/V head query head h reads (GQA: consecutive query heads share one, as repeat_interleave).
  std::int64_t kv_head_of(std::int64_t h) const { return h / kv_group(); }
};

struct ModelOptions {
  // Backend::reference: explicit loops everywhere (the attention's reference path too);
  // anything else: the Eigen kernels.
  Backend backend = Backend::eigen;
  int threads = 0;  // as Options::threads
  // A mask per layer replacing the model's own (a what-if: block a key at layer i). Empty or nullopt:
  // the model's (causal, and a sliding window for mistral). Shapes as mha::forward takes them: (T, T)
  // or (H, T, T), torch's conventions.
  std::vector<std::optional<Mask<float>>> attn_masks;
  // A what-if per layer, not the model's computation: layer l's q is divided by score_divisors[l]
  // instead of √d_k (Options::score_divisor: the temperature and "scale off" controls). Missing or
  // 0: √d_k, the model's own.
  std::vector<double> score_divisors;
  // Head knock-outs, a what-if at any layers: each listed head's context is replaced as `ablation`
  // says before the out-projection, and the layers after read the residual stream that changed.
  // The head's scores and weights are computed and traced as usual (they are what it would have
  // done); its layer's `context`, `context_transposed`, `concat` and `output` stages hold what the
  // block used, and their notes name the heads replaced. Throws ConfigError("knockouts") for a head
  // outside the model.
  std::vector<HeadRef> knockouts;
  Ablation ablation = Ablation::zero;
  std::int64_t top_k = 5;
};

// The activations every family keeps, as llm.c keeps them. T tokens, C = n_embd. A family's run
// (GPT2Run, LlamaRun) adds the ones only it has.
struct ModelRun {
  std::vector<std::int32_t> input_ids;  // (T,)
  Tensor<float> residual;               // (n_layer + 1, T, C): input to block l; last: after the last block
  std::vector<ForwardResult<float>>
      attn;                      // per layer: the traced attention (query = the block's norm output)
  Tensor<float> logits;          // (vocab_size,): the last position's
  std::vector<TokenProb> top_k;  // most probable next tokens, best first
  Rotary<float> rotary;          // RoPE's cos, sin (T, d_k) every layer reads; empty without RoPE
  // Each layer's attention buffers, reused by the next forward into this run (see mha::Workspace).
  std::vector<Workspace<float>> workspaces;

  ModelRun() = default;
  ModelRun(const ModelRun&) = default;
  ModelRun(ModelRun&&) = default;
  ModelRun& operator=(const ModelRun&) = default;
  ModelRun& operator=(ModelRun&&) = default;
  virtual ~ModelRun() = default;
  virtual std::unique_ptr<ModelRun> clone() const { return std::make_unique<ModelRun>(*this); }
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual ModelSizes sizes() const = 0;  // made from the config and weights on each call
  // The attention module of every layer as mha::forward runs it, and layer l's parameters.
  virtual Config attention_config() const = 0;
  virtual const Weights<float>& attention_weights(std::int64_t layer) const = 0;
  // The mask every layer uses at T tokens: causal, and a sliding window where the model has one.
  // Boolean (T, T), True = blocked.
  virtual Mask<float> attention_mask(std::int64_t T) const = 0;
  // An empty run of this family, for forward() to fill.
  virtual std::unique_ptr<ModelRun> new_run() const = 0;
  // The whole forward into `run` (from new_run), reusing its buffers where the sizes match. Throws
  // ConfigError for an empty text, one longer than max_positions or an id outside the vocabulary.
  virtual void forward(const std::vector<std::int32_t>& input_ids, const ModelOptions& o,
                       ModelRun& run) const = 0;
  // Recomputes `run` from block `layer` on, the residual stream before it kept.
  virtual void forward_from(ModelRun& run, std::int64_t layer, const ModelOptions& o) const = 0;
  // The logits at any position of a finished run (run.logits holds only the last one's), in double:
  // the final norm's row `position` times the LM head. (vocab_size,) into `logits`.
  virtual void logits_at(const ModelRun& run, std::int64_t position, std::vector<double>& logits) const = 0;
  // NaN/Inf among the weights (the loaders warn about them).
  virtual std::int64_t nonfinite_weights() const = 0;
  // Multiply-adds ×2 of one forward at T tokens (the benchmarks' GFLOP/s): the projections, the
  // attention's T² terms, the MLP and the last position's LM head.
  virtual double forward_flops(std::int64_t T) const = 0;

  std::unique_ptr<ModelRun> forward(const std::vector<std::int32_t>& input_ids,
                                    const ModelOptions& o = {}) const {
    std::unique_ptr<ModelRun> run = new_run();
    forward(input_ids, o, *run);
    return run;
  }
};

// Throws ConfigError("knockouts") for a head outside a model of these sizes.
void check_knockouts(const ModelSizes& s, const std::vector<HeadRef>& heads);
// Every head of `layer` except `keep`: the "all but these heads" knock-out. Throws ConfigError
// ("knockouts") for a layer or head outside the model.
std::vector<HeadRef> heads_except(const ModelSizes& s, std::int64_t layer,
                                  const std::vector<std::int64_t>& keep);
// "1.0,1.3" (layer.head, comma-separated) to heads; throws ConfigError naming `argument` for an item
// that is not one. Does not check them against a model (the forward does).
std::vector<HeadRef> parse_heads(const std::string& text, const std::string& argument);
// The same form back: "1.0,1.3" (sorted as given).
std::string format_heads(const std::vector<HeadRef>& heads);
// The first layer a knock-out touches: where forward_from starts (n_layer when none).
std::int64_t first_knockout_layer(const ModelSizes& s, const std::vector<HeadRef>& heads);

// How much a head's attention pattern moved between two runs on the same ids: the largest
// |Δ attn_weights| over its (T, T) weights (NaN rows compare equal to NaN rows).
struct PatternChange {
  HeadRef head;
  double max_abs_diff = 0;
};
// Every head of every layer, layer by layer. Throws ConfigError("run") when the runs differ in
// layers, heads or tokens.
std::vector<PatternChange> pattern_changes(const ModelRun& before, const ModelRun& after);
// A head whose largest weight change is at least this is reported as changed: 0.001 of a weight is
// below what the heatmaps can show, and above float rounding through a few layers (~1e-6).
constexpr double kPatternChanged = 1e-3;

namespace detail {
// Layer l's traced attention into run.attn[l] (reusing run.workspaces[l]): `in` holds the query (1,
// T, C), with key and value the same tensor, and RoPE's tables where the model has them. Masked by
// o.attn_masks[l] when set, else by the model's own attention_mask(T); o's backend, threads and score
// divisor; the weights' NaN/Inf are not counted again (the loader counted them once); then the
// layer's knock-outs. Returns the attention's output (1, T, C), contiguous.
const Stage<float>& layer_attention(const LanguageModel& m, std::int64_t l, Inputs<float>& in,
                                    const ModelOptions& o, ModelRun& run);
// Layer l's knock-outs (o.knockouts at that layer) on its traced attention `r` (N = 1): the chosen
// heads' context replaced, then concat and the out-projection (w.out_proj_*) recomputed from it. The
// new values go into new buffers that the stages then point at, so the trace shows what the block used.
void knock_out_heads(const Config& attn, const Weights<float>& w, std::int64_t l, const ModelOptions& o,
                     ForwardResult<float>& r);
// logits (V,) = head (V, C) · x (C,), in double: the plain loop logits_at runs.
void head_logits_double(const Tensor<float>& head, const float* x, std::vector<double>& logits);
// `run` as the family's own run type (Run: GPT2Run, LlamaRun), or ConfigError("run") naming the
// family when it came from another model's new_run().
[[noreturn]] void throw_wrong_run(const char* family);
template <class Run, class Base>
Run& family_run(Base& run, const char* family) {
  auto* r = dynamic_cast<Run*>(&run);
  if (!r) throw_wrong_run(family);
  return *r;
}
// run.top_k from run.logits: the o.top_k most probable ids by softmax, best first (ties: lower id).
void top_k_from_logits(const ModelOptions& o, ModelRun& run);
}  // namespace detail

}  // namespace mha
