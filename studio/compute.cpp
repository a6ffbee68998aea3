// Scenario -> engine inputs, and the compute worker: one background thread, newest job wins,
// results carry a sequence number so a late worker result never replaces a newer one.
#include "compute.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cost.hpp"
#include "errors.hpp"
#include "masks.hpp"
#include "model/rope.hpp"
#include "model_cache.hpp"
#include "torch_rng.hpp"

namespace mha::studio {

namespace {

void require_shape(const char* name, const Tensor<float>& t, const Shape& want) {
  if (t.shape != want)
    throw ShapeError("tensors", std::string("the edited ") + name + " is " + shape_str(t.shape) +
                                    " but the sizes now need " + shape_str(want) +
                                    ": reset it (Inputs → Reset) or change the sizes back");
}

// The scenario's mask cells as the engine's mask, into `out` (its storage reused where it fits):
// from `packed`'s bits where it holds them (s is then its scenario), else from s's cells.
void mask_from_spec(const Scenario& s, const Snapshot* packed, std::int64_t N, std::int64_t L, std::int64_t S,
                    Mask<float>& out) {
  const MaskSpec& m = s.mask;
  const Shape want = attn_mask_shape(m.scope, N, s.num_heads, L, S);
  const std::size_t cells = packed ? packed->mask_cells() : m.cells.size();
  if (m.cells_shape != want || cells != std::size_t(numel(want)))
    throw ShapeError("attn_mask", "the mask is " + shape_str(m.cells_shape) +
                                      " but the sizes and scope need " + shape_str(want) +
                                      ": pick a preset again or reset the mask");
  if (packed && packed->cells)
    mask_from_blocked(want, packed->blocked, m.convention, out);
  else
    mask_from_additive(want, m.cells, m.convention, out);
}

}  // namespace

// A model's whole forward on the scenario's sentence, the mask replacing the model's own at the
// chosen layer: what the app shows and what `mha compute --scenario` computes.
struct ModelForward {
  std::shared_ptr<const ModelEntry> entry;
  ModelTokens tokens;
  ModelOptions options;
  std::unique_ptr<ModelRun> run;
  std::unique_ptr<ModelRun> before;  // with knock-outs: the forward without them
};
ModelForward run_model_forward(const Scenario& s) {
  ModelForward r;
  r.entry = model_entry(s.model);
  const LanguageModel& m = *r.entry->loaded.model;
  const ModelSizes c = m.sizes();
  r.tokens = model_tokens(s.model, s.sentence);
  const std::int64_t T = std::int64_t(r.tokens.ids.size());
  if (T == 0) throw ConfigError("sizes", "type a sentence: the model needs at least one token");
  if (T > c.max_positions)
    throw ConfigError("sizes", "the sentence has " + std::to_string(T) +
                                   " tokens; this model takes at most " + std::to_string(c.max_positions));
  if (s.layer < 0 || s.layer >= c.n_layer)
    throw ConfigError("sizes", "layer " + std::to_string(s.layer) + ": the model has " +
                                   std::to_string(c.n_layer) + " layers");
  r.options.attn_masks.resize(std::size_t(c.n_layer));
  // The causal preset is the model's own mask (a sliding window too, for Mistral); anything else is
  // the what-if the scenario holds.
  r.options.attn_masks[std::size_t(s.layer)] =
      s.mask.preset == MaskPreset::causal ? m.attention_mask(T) : model_layer_mask(s, T);
  // The temperature and scale what-ifs, like the mask, at the chosen layer only: the layers after it
  // read the residual stream it changed.
  if (s.what_if.active()) {
    r.options.score_divisors.assign(std::size_t(c.n_layer), 0.0);
    r.options.score_divisors[std::size_t(s.layer)] = s.what_if.divisor(c.head_dim);
  }
  r.run = m.forward(r.tokens.ids, r.options);
  if (s.knockouts.active()) {
    // Knock-outs at any layers, the layers after following: recomputed from the first one, the run
    // without them kept for Compare.
    r.before = r.run->clone();
    r.options.knockouts = s.knockouts.heads;
    r.options.ablation = s.knockouts.ablation;
    m.forward_from(*r.run, first_knockout_layer(c, s.knockouts.heads), r.options);
  }
  return r;
}

// With a model: the chosen layer's attention as one module, on that layer's input (ln_1 of the
// residual stream after the layers before it), with the layer's mask. Its forward is the layer's.
Built build_model_layer(const Scenario& s) {
  // Knock-outs at earlier layers are in the layer's input; at this layer they change its output,
  // which one nn.MultiheadAttention cannot compute.
  for (const HeadRef& h : s.knockouts.heads)
    if (h.layer == s.layer)
      throw ConfigError("knockouts", "head " + format_heads({h}) +
                                         " is knocked out at this layer: one module's forward cannot show "
                                         "that (mha compute --model DIR --ablate " +
                                         format_heads(s.knockouts.heads) + " computes the model's)");
  const ModelForward r = run_model_forward(s);
  const std::size_t l = std::size_t(s.layer);
  const LanguageModel& m = *r.entry->loaded.model;
  Built b;
  b.config = m.attention_config();
  b.weights = m.attention_weights(s.layer);
  b.inputs.query = r.run->attn[l].trace["query"].contiguous();
  b.inputs.key = b.inputs.query;
  b.inputs.value = b.inputs.query;
  if (!r.run->rotary.cos.empty()) b.inputs.rotary = r.run->rotary;
  b.inputs.attn_mask = r.options.attn_masks[l];
  b.options.fully_masked = s.fully_masked;
  b.options.backend = Backend::eigen;
  if (l < r.options.score_divisors.size()) b.options.score_divisor = r.options.score_divisors[l];
  return b;
}

Built build_forward(const Scenario& s, bool check_trace) {
  Built b;
  build_forward_into(s, b, check_trace);
  return b;
}

namespace {

// build_forward_into, the mask from `packed`'s bits where it holds them (s is then its scenario).
void build_into(const Scenario& s, const Snapshot* packed, Built& b, bool check_trace) {
  if (s.has_model()) {
    b = build_model_layer(packed && packed->cells ? packed->unpacked() : s);
    return;
  }
  // The mask's storage is set aside while the inputs are assigned (they carry none of their own).
  std::optional<Mask<float>> mask = std::move(b.inputs.attn_mask);
  b.config = Config{};
  b.options = Options{};
  Config& c = b.config;
  c.embed_dim = s.embed_dim;
  c.num_heads = s.num_heads;
  c.num_kv_heads = s.num_kv_heads;
  c.bias = s.bias;
  validate(c);
  const std::int64_t N = s.batch, L = s.L(), S = s.S();
  if (N <= 0 || L <= 0 || S <= 0)
    throw ConfigError("sizes", "batch, query length and key length must be positive (N=" + std::to_string(N) +
                                   ", L=" + std::to_string(L) + ", S=" + std::to_string(S) + ")");
  const bool has_mask =
      (packed ? packed->mask_cells() : s.mask.cells.size()) > 0 || !s.mask.key_padding.empty();
  if (check_trace) check_trace_fits(dims_for(c, N, L, S), sizeof(float), has_mask, 0);

  // torch.manual_seed(seed), then the inputs, then nn.MultiheadAttention's default init. The draws
  // are kept per thread: mask and value edits at unchanged sizes reuse them instead of drawing
  // N·L·E + 4·E² numbers again (25–35 ms at L = E = 512). They depend on the shapes drawn, not on the
  // head count itself: a head-count change that keeps num_kv_heads·d_k reuses them too.
  const bool separate = s.cross_attention || s.separate_qkv;
  const std::vector<std::int64_t> key = {std::int64_t(s.seed), N,      L,       S, s.embed_dim,
                                         c.kv_embed_dim(),     s.bias, separate};
  thread_local std::vector<std::int64_t> seeded_key;
  thread_local SeededCase<float> seeded;
  if (seeded_key != key) {
    if (separate) {
      seeded = torch_seeded_case<float>(c, s.seed, N, L, S);
    } else {
      TorchGenerator gen(s.seed);
      seeded.inputs = {};
      seeded.inputs.query = gen.rand<float>({N, L, s.embed_dim});
      seeded.weights = torch_default_init<float>(c, gen);
    }
    seeded_key = key;
  }
  // Copy-assigned: b's tensors keep their storage where the sizes fit.
  if (s.query) require_shape("query", *s.query, {N, L, s.embed_dim});
  b.inputs.query = s.query ? *s.query : seeded.inputs.query;
  b.inputs.key = seeded.inputs.key;
  b.inputs.value = seeded.inputs.value;
  b.inputs.attn_mask.reset();
  b.inputs.key_padding_mask.reset();
  b.weights = s.weights ? *s.weights : seeded.weights;
  if (!s.cross_attention && !s.separate_qkv) {
    b.inputs.key = b.inputs.query;  // self-attention: one x for query, key and value
    b.inputs.value = b.inputs.query;
  }
  if (s.key) require_shape("key", *s.key, {N, S, s.embed_dim}), b.inputs.key = *s.key;
  if (s.value) require_shape("value", *s.value, {N, S, s.embed_dim}), b.inputs.value = *s.value;
  // s.weights: the engine checks their shapes and names them.

  if ((packed ? packed->mask_cells() : s.mask.cells.size()) > 0) {
    if (!mask) mask.emplace();
    mask_from_spec(s, packed, N, L, S, *mask);
    b.inputs.attn_mask = std::move(mask);
    if (s.mask.scope == MaskScope::per_batch) b.options.attn_mask_layout = MaskLayout::per_batch;
  }
  if (!s.mask.key_padding.empty()) {
    if (s.mask.key_padding.size() != std::size_t(N * S))
      throw ShapeError("key_padding_mask",
                       "the key padding mask has " + std::to_string(s.mask.key_padding.size()) +
                           " cells but (N, S) = " + shape_str({N, S}) + " needs " + std::to_string(N * S));
    Mask<float> kpm;
    kpm.values = Tensor<float>({N, S});
    for (std::size_t i = 0; i < s.mask.key_padding.size(); ++i)
      kpm.values.data[i] = s.mask.key_padding[i] ? 1 : 0;
    b.inputs.key_padding_mask = std::move(kpm);
  }
  b.options.fully_masked = s.fully_masked;
  b.options.backend = cpu_backend_for(forward_work(s));
  // validate() above: num_heads divides embed_dim.
  if (s.what_if.active()) b.options.score_divisor = s.what_if.divisor(s.embed_dim / s.num_heads);
}

}  // namespace

void build_forward_into(const Scenario& s, Built& b, bool check_trace) {
  build_into(s, nullptr, b, check_trace);
}

void build_forward_into(const Snapshot& s, Built& b, bool check_trace) {
  build_into(s.scenario, &s, b, check_trace);
}

Mask<float> model_layer_mask(const Scenario& s, std::int64_t T) {
  if (s.mask.cells.empty()) return causal_mask<float>(T, T);
  Mask<float> m;
  mask_from_spec(s, nullptr, 1, T, T, m);
  return m;
}

double forward_work(const Scenario& s) {
  // A model runs every layer and is loaded on first use: always on the worker.
  if (s.has_model()) return 2 * kSyncWorkLimit;
  // A scenario's key and value have width E (no kdim/vdim) and no bias_k / zero rows.
  cost::Shape sh;
  sh.N = double(s.batch), sh.L = double(s.L()), sh.S = double(s.S()), sh.S_total = sh.S;
  sh.E = sh.kdim = sh.vdim = double(s.embed_dim);
  sh.kv = s.num_heads > 0 && s.num_kv_heads > 0 ? sh.E * double(s.num_kv_heads) / double(s.num_heads) : sh.E;
  return cost::forward_work(sh);
}

namespace {

double stage_cells(const Scenario& s) {  // cells of one (N, H, L, S) stage
  return double(s.batch) * double(s.num_heads) * double(s.L()) * double(s.S());
}

// The stages a worker forward keeps. From 2^20 cells per (N, H, L, S') stage on, the raw, scaled and
// masked scores are left out: views compute the one on screen when asked (mha::find_stage), and
// every edit saves writing three such arrays. The weights and their average stay up to
// kOverviewCells. Past it (L = S = 2048 at 4 heads) they go too, and the Heads view draws the
// weights overview (overview_block), unless the view on screen reads every weight.
constexpr double kOverviewCells = double(1 << 24);
// Where the view on screen reads every weight of a result (Overview, Token lines, Compare:
// Snapshot::reads_every_weight), the worker keeps them: computing them for each result would stall
// its frame (about 230 ms at L = 2048).
bool keeps_overview(const Snapshot& packed, Backend backend) {
  return backend == Backend::eigen && stage_cells(packed.scenario) >= kOverviewCells &&
         !packed.reads_every_weight;
}
std::vector<std::string> kept_stages(const Snapshot& packed, Backend backend) {
  if (backend != Backend::eigen || stage_cells(packed.scenario) < double(1 << 20)) return {};
  if (keeps_overview(packed, backend)) return {"output"};
  return {"attn_weights", "attn_weights_avg", "output"};
}

// The weights overview's keys per column where kept_stages leaves the weights out: at most 256
// columns (a map of 256 texels is as wide as the Heads view draws one at 1920 pixels); else 0.
std::int64_t overview_block(const Snapshot& packed, Backend backend) {
  if (!keeps_overview(packed, backend)) return 0;
  return std::max<std::int64_t>(1, (packed.scenario.S() + 255) / 256);
}

// What decides the shape of a forward's result: a request that changes any of these cancels the
// running forward.
std::vector<std::int64_t> result_sizes(const Scenario& s) {
  return {s.batch,           s.L(),         s.S(), s.embed_dim, s.num_heads, s.num_kv_heads, s.has_model(),
          s.cross_attention, s.separate_qkv};
}

// Whether `a` and `b` ask for the same forward but for their masks and weights.
bool same_inputs(const Built& a, const Built& b) {
  const Config &x = a.config, &y = b.config;
  if (x.embed_dim != y.embed_dim || x.num_heads != y.num_heads || x.kv_heads() != y.kv_heads() ||
      x.bias != y.bias || x.key_dim() != y.key_dim() || x.value_dim() != y.value_dim() ||
      x.add_bias_kv != y.add_bias_kv || x.add_zero_attn != y.add_zero_attn || x.batch_first != y.batch_first)
    return false;
  if (a.options.attn_mask_layout != b.options.attn_mask_layout ||
      a.options.fully_masked != b.options.fully_masked || a.options.backend != b.options.backend ||
      a.options.score_divisor != b.options.score_divisor)
    return false;
  return a.inputs.query.identical(b.inputs.query) && a.inputs.key.identical(b.inputs.key) &&
         a.inputs.value.identical(b.inputs.value);
}

// Whether `a` and `b` hold the same weights.
bool same_weights(const Built& a, const Built& b) {
  // state_dict hands out mutable pointers; they are only read here (no 4·E² copies per edit).
  const auto da = state_dict(const_cast<Weights<float>&>(a.weights));
  const auto db = state_dict(const_cast<Weights<float>&>(b.weights));
  if (da.size() != db.size()) return false;
  for (std::size_t i = 0; i < da.size(); ++i)
    if (da[i].first != db[i].first || !da[i].second->identical(*db[i].second)) return false;
  return true;
}

}  // namespace

Computer::Computer() : worker_([this] { worker_loop(); }) {}

Computer::~Computer() {
  stop();
}

void Computer::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Computer::set_device(DeviceForward* device, std::string description) {
  device_ = device;
  device_description_ = std::move(description);
}

Computer::BackendTimes Computer::times() const {
  std::lock_guard<std::mutex> lock(times_mutex_);
  return times_;
}

Computer::Outcome Computer::run(const Snapshot& packed, Slot* slot) {
  const Scenario& s = packed.scenario;
  Workspace<float>* ws = slot ? &slot->ws : nullptr;
  Outcome out;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    if (s.has_model()) {
      Result r = run_model(packed.cells ? packed.unpacked() : s);
      r.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(times_mutex_);
      times_.cpu_ms = r.compute_ms;
      out.result = std::move(r);
      return out;
    }
    // On the worker, the Built of the job before the last: its storage is reused (see Slot).
    Built local;
    Built& b = ws ? builts_[last_built_ == 0 ? 1 : 0] : local;
    if (ws && spare_mask_) b.inputs.attn_mask = std::move(spare_mask_), spare_mask_.reset();
    build_forward_into(packed, b);
    const BackendChoice choice = choice_;
    if (ws && choice == BackendChoice::gpu) {
      b.options.backend = Backend::gpu;
      b.options.device = device_;
    } else if (ws && choice == BackendChoice::automatic && b.options.backend == Backend::eigen) {
      b.options.backend = Backend::automatic;  // the engine asks the device whether it wants the size
      b.options.device = device_;
    } else if (!ws && choice == BackendChoice::gpu) {
      throw ConfigError("backend", "internal: a GPU forward was asked for on the UI thread");
    }
    std::shared_ptr<ForwardResult<float>> fwd;
    bool mask_rows_only = false, heads_only = false, in_place = false, projections_reused = false;
    std::shared_ptr<const std::vector<char>> changed;
    std::weak_ptr<const ForwardResult<float>> changed_since;
    if (ws) {
      fwd = std::make_shared<ForwardResult<float>>();
      if (b.options.backend == Backend::automatic) {  // resolved here, as the engine would
        const Dims d = check_inputs(b.config, b.weights, b.inputs, b.options);
        b.options.backend = device_ && device_->prefers(d) ? Backend::gpu : Backend::eigen;
      }
      b.options.stages = kept_stages(packed, b.options.backend);
      b.options.weights_overview = overview_block(packed, b.options.backend);
      b.options.control = &control_;
      // The inputs (but for masks and weights) and the weights, each with an id that stays while
      // they equal the last job's: whether a slot's kept result was computed from the same ones is
      // then a comparison of ids (equal values are a chain), not of tensors.
      const bool eigen = b.options.backend == Backend::eigen;
      const Built* last = last_built_ >= 0 ? &builts_[last_built_] : nullptr;
      const bool same_inputs_as_last = eigen && last && same_inputs(*last, b);
      // Compared whatever the inputs: a value drag keeps the weights' id (and their shared copy).
      const bool same_weights_as_last = eigen && last && same_weights(*last, b);
      const std::uint64_t inputs_id = same_inputs_as_last ? last_ids_.inputs : ++ids_;
      const std::uint64_t weights_id = same_weights_as_last ? last_ids_.weights : ++ids_;
      std::shared_ptr<const ForwardResult<float>> base =
          same_inputs_as_last && same_weights_as_last ? last_.lock() : nullptr;
      const bool slot_inputs = eigen && slot->kept && slot->ids.inputs == inputs_id;
      // The slot's kept result, edited in place when only the masks, or only the weights, differ
      // from its own. Taken out of the slot first: if the edit throws, the half-edited copy goes
      // with the stack.
      std::shared_ptr<ForwardResult<float>> kept = std::move(slot->kept);
      std::vector<char> rows;  // the query rows that differ from base's
      if (slot_inputs && slot->ids.weights == weights_id &&
          forward_mask_edit_in_place(b.config, b.weights, b.inputs, b.options, *ws, *kept, base.get(),
                                     &rows)) {
        mask_rows_only = in_place = true;
        *fwd = *kept;  // delivered as a new object sharing the buffers (see Slot)
      } else if (slot_inputs && slot->ids.weights != weights_id && slot->weights &&
                 forward_weights_edit_in_place(b.config, b.weights, *slot->weights, b.inputs, b.options, *ws,
                                               *kept)) {
        // Only the weights differ (the engine checks the masks): the heads they move are redone.
        heads_only = in_place = true;
        *fwd = *kept;
      } else {
        kept.reset();  // its buffers are free for this forward to reuse
        // A value edit or a head-count change: the last result's q, k and v, the rows whose inputs
        // changed projected again (the engine checks that its projections apply).
        const std::shared_ptr<const ForwardResult<float>> last_result = eigen ? last_.lock() : nullptr;
        if (base)
          mask_rows_only =
              forward_mask_edit(b.config, b.weights, b.inputs, b.options, *base, *ws, *fwd, &rows);
        else if (last_result && last_weights_)
          projections_reused = forward_inputs_edit(b.config, b.weights, *last_weights_, b.inputs, b.options,
                                                   *last_result, *ws, *fwd);
        else
          forward(b.config, b.weights, b.inputs, b.options, *ws, *fwd);
      }
      if (mask_rows_only && base) {
        changed = std::make_shared<const std::vector<char>>(std::move(rows));
        changed_since = base;
      }
      last_ = fwd;
      // The weights the kept result was computed with (for a weights edit), shared while unchanged.
      std::shared_ptr<const Weights<float>> weights = same_weights_as_last && last_weights_
                                                          ? last_weights_
                                                          : std::make_shared<const Weights<float>>(b.weights);
      // The mask's storage waits for the next job's (the result's trace holds the merged mask).
      spare_mask_ = std::move(b.inputs.attn_mask);
      b.inputs.attn_mask.reset();
      b.inputs.key_padding_mask.reset();
      last_built_ = &b == &builts_[0] ? 0 : 1;
      last_ids_ = slot->ids = {inputs_id, weights_id};
      last_weights_ = slot->weights = weights;
      if (fwd->backend == Backend::eigen) {
        slot->kept = std::make_shared<ForwardResult<float>>(*fwd);
        // What views compute from the delivered result stays with it, not with the worker's copy.
        if (slot->kept->trace.computed)
          slot->kept->trace.computed = std::make_shared<ComputedStages<float>>();
      }
    } else {
      fwd = std::make_shared<ForwardResult<float>>(forward(b.config, b.weights, b.inputs, b.options));
    }
    Result r;
    r.forward = std::move(fwd);
    r.mask_rows_only = mask_rows_only;
    r.in_place = in_place;
    r.heads_only = heads_only;
    r.projections_reused = projections_reused;
    r.rows_changed = std::move(changed);
    r.changed_since = changed_since;
    r.query_tokens = s.query_tokens();
    r.key_tokens = s.key_tokens();
    r.compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(times_mutex_);
      const Backend ran = r.forward->backend;
      (ran == Backend::gpu         ? times_.gpu_ms
       : ran == Backend::reference ? times_.reference_ms
                                   : times_.cpu_ms) = r.compute_ms;
    }
    out.result = std::move(r);
  } catch (const Cancelled&) {
    out.cancelled = true;
  } catch (const Error& e) {
    out.error = e.what();
    out.error_argument = e.argument;
  } catch (const std::bad_alloc&) {
    out.error = "out of memory while computing this size; the last result is kept";
    out.error_argument = "sizes";
  }
  return out;
}

std::string head_role_label(const ModelResult& m, std::int64_t layer, std::int64_t head) {
  const std::int64_t H = m.n_layer > 0 ? std::int64_t(m.sentence_roles.size()) / m.n_layer : 0;
  if (head < H && layer < m.n_layer)
    if (std::string tag = role_tag(m.sentence_roles[std::size_t(layer * H + head)]); !tag.empty()) return tag;
  if (m.roles && layer < m.roles->n_layer && head < m.roles->n_head)
    if (const std::string tag = role_tag(m.roles->at(layer, head)); !tag.empty()) return "probe: " + tag;
  return "";
}

std::string head_role_details(const ModelResult& m, std::int64_t layer, std::int64_t head) {
  std::string out;
  char line[200];
  const std::int64_t H = m.n_layer > 0 ? std::int64_t(m.sentence_roles.size()) / m.n_layer : 0;
  if (head < H && layer < m.n_layer) {
    const SentenceRole& r = m.sentence_roles[std::size_t(layer * H + head)];
    std::snprintf(line, sizeof line, "this sentence: prev-token %.2f, first-token %.2f", r.prev_token,
                  r.first_token);
    out += line;
    if (r.induction)
      std::snprintf(line, sizeof line, ", induction %.2f, duplicate %.2f (%lld repeated tokens)\n", *r.induction,
                    *r.duplicate_token, (long long)r.repeat_rows);
    else
      std::snprintf(line, sizeof line, "; no token repeats, so no induction or duplicate score\n");
    out += line;
  }
  if (m.roles && layer < m.roles->n_layer && head < m.roles->n_head) {
    const HeadRole& r = m.roles->at(layer, head);
    std::snprintf(line, sizeof line,
                  "probes (8 fixed sentences; 8 random sequences repeated): prev-token %.2f, first-token %.2f, "
                  "induction %.2f, duplicate %.2f",
                  r.prev_token, r.first_token, r.induction, r.duplicate_token);
    out += line;
  }
  return out;
}

Result Computer::run_model(const Scenario& s) {
  ModelForward model_run = run_model_forward(s);
  const std::shared_ptr<const ModelEntry>& e = model_run.entry;
  const LanguageModel& m = *e->loaded.model;
  const ModelSizes sizes = m.sizes();
  const ModelTokens& tokens = model_run.tokens;
  const ModelOptions& o = model_run.options;
  ModelRun& run = *model_run.run;

  Result r;
  ModelResult mr;
  if (model_run.before) {  // before the layers move out of `run`
    mr.knockouts = s.knockouts;
    mr.top_k_before = model_run.before->top_k;
    for (const TokenProb& t : mr.top_k_before)
      mr.top_k_before_labels.push_back(e->tokenizer ? e->tokenizer->display_piece(t.id)
                                                    : "#" + std::to_string(t.id));
    mr.pattern_changes = pattern_changes(*model_run.before, run);
  }
  for (ForwardResult<float>& layer : run.attn)
    mr.layers.push_back(std::make_shared<const ForwardResult<float>>(std::move(layer)));
  r.forward = mr.layers[std::size_t(s.layer)];
  if (r.forward->trace.has("q_rot"))
    mr.scores_without_rope = std::make_shared<const Tensor<float>>(scores_without_rope(*r.forward));
  r.query_tokens = tokens.labels;
  r.key_tokens = tokens.labels;
  mr.name = s.model;
  mr.layer = s.layer;
  mr.n_layer = sizes.n_layer;
  mr.sizes = sizes;
  mr.top_k = run.top_k;
  for (const TokenProb& t : run.top_k)
    mr.top_k_labels.push_back(e->tokenizer ? e->tokenizer->display_piece(t.id) : "#" + std::to_string(t.id));
  mr.roles = model_roles(*e);
  for (std::int64_t l = 0; l < sizes.n_layer; ++l) {
    const std::vector<float> w = mr.layers[std::size_t(l)]->trace["attn_weights"].contiguous().data;  // (H, T, T)
    const std::int64_t T = std::int64_t(tokens.ids.size());
    for (std::int64_t h = 0; h < sizes.n_head; ++h)
      mr.sentence_roles.push_back(sentence_role(w.data() + h * T * T, T, tokens.ids.data()));
  }
  // The same layer input through default-init weights (torch.manual_seed(seed), nn.MultiheadAttention).
  const Config c = m.attention_config();
  TorchGenerator gen(s.seed);
  const Weights<float> w = torch_default_init<float>(c, gen);
  Inputs<float> in;
  in.query = r.forward->trace["query"].contiguous();
  in.key = in.query;
  in.value = in.query;
  in.attn_mask = o.attn_masks[std::size_t(s.layer)];
  if (!run.rotary.cos.empty()) in.rotary = run.rotary;
  Options untrained;  // with the layer's what-if too: the comparison changes one thing, the weights
  if (std::size_t(s.layer) < o.score_divisors.size())
    untrained.score_divisor = o.score_divisors[std::size_t(s.layer)];
  mr.untrained = std::make_shared<const ForwardResult<float>>(forward(c, w, in, untrained));
  r.model = std::move(mr);
  return r;
}

void Computer::request(std::shared_ptr<const Snapshot> state) {
  const Scenario& s = state->scenario;
  const std::uint64_t seq = ++requested_;
  if (forward_work(s) <= kSyncWorkLimit && choice_ != BackendChoice::gpu) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (running_) control_.cancel = true;  // a small problem now: the worker's is of other sizes
    }
    Outcome o = run(*state, nullptr);
    std::lock_guard<std::mutex> lock(mutex_);
    job_.reset();      // a queued larger job is older than this edit
    busy_ = running_;  // still busy only if the worker is mid-job (its result will be dropped)
    deliver(std::move(o), seq);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ && result_sizes(s) != running_sizes_) control_.cancel = true;
    job_ = Job{std::move(state), seq};
    busy_ = true;
  }
  cv_.notify_all();
}

double Computer::progress() const {
  const std::int64_t total = control_.total, done = control_.done;
  return busy_ && total > 0 ? std::clamp(double(done) / double(total), 0.0, 1.0) : 0.0;
}

std::int64_t Computer::allocations() const {
  std::int64_t n = 0;
  for (const Slot& slot : slots_) n += slot.ws.allocations();
  return n;
}

bool Computer::wait_idle(double ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_cv_.wait_for(lock, std::chrono::duration<double, std::milli>(ms), [this] { return !busy_; });
}

double Computer::expected_ms(const Scenario& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  return ms_per_work_ < 0 || s.has_model() ? -1 : forward_work(s) * ms_per_work_;
}

void Computer::deliver(Outcome o, std::uint64_t seq) {
  if (seq < delivered_seq_) return;  // an older job finished after a newer one: drop it
  delivered_seq_ = seq;
  // Unique in the whole process (not per Computer), so a generation never names two results.
  static std::atomic<std::uint64_t> generations{0};
  if (o.result) o.result->generation = ++generations;
  done_ = std::move(o);
}

std::optional<Computer::Outcome> Computer::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<Outcome> o = std::move(done_);
  done_.reset();
  return o;
}

void Computer::worker_loop() {
#ifdef __linux__
  // The worker (and the threads its forwards start, which inherit it) runs at nice 5, a third of
  // the UI thread's share of a core when both want one: frames drawn while a forward runs stay
  // under 20 ms at L = 2048 (p95 20 ms at the same priority), and an idle UI leaves it every core.
  setpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)), 5);
#endif
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return quit_ || job_.has_value(); });
    if (quit_) return;
    Job job = std::move(*job_);
    job_.reset();
    running_ = true;
    running_sizes_ = result_sizes(job.state->scenario);
    control_.cancel = false;
    control_.total = 0;
    lock.unlock();
    // The next slot in turn whose buffers nobody but its own kept result holds. The app holds the
    // result on screen and the one before the edit; during a drag (one edit) that one stays, and
    // strict turns would then make the drag's third forward allocate a whole trace beside it.
    int pick = next_slot_;
    for (int k = 0; k < 3; ++k) {
      Slot& s = slots_[(next_slot_ + k) % 3];
      if (!s.kept || held_alone(*s.kept, s.ws)) {
        pick = (next_slot_ + k) % 3;
        break;
      }
    }
    Slot& slot = slots_[pick];
    next_slot_ = (pick + 1) % 3;
    take_scratch(pick);
    Outcome o = run(*job.state, &slot);
    lock.lock();
    running_ = false;
    std::shared_ptr<const ForwardResult<float>> shown;
    if (o.result) {
      shown = o.result->forward;
      const Result& r = *o.result;
      if (!r.in_place && !r.mask_rows_only && !r.heads_only && !r.projections_reused &&
          !job.state->scenario.has_model())
        ms_per_work_ = r.compute_ms / forward_work(job.state->scenario);
    }
    if (o.cancelled)
      ++cancelled_;
    else
      deliver(std::move(o), job.seq);
    busy_ = job_.has_value();
    if (!busy_) idle_cv_.notify_all();
    if (shown && !job_) presizing_ = true;
    if (on_done) {
      lock.unlock();
      on_done();
      lock.lock();
    }
    if (presizing_) {
      lock.unlock();
      presize(*job.state, *shown);
      shown.reset();
      lock.lock();
      presizing_ = false;
      if (on_done) {  // a loop waiting for the worker to settle wakes here
        lock.unlock();
        on_done();
        lock.lock();
      }
    }
  }
}

void Computer::take_scratch(int slot) {
  if (scratch_slot_ >= 0) move_scratch(slots_[scratch_slot_].ws, slots_[slot].ws);
  scratch_slot_ = slot;
}

void Computer::drop_kept(const Dims& d) {
  auto same = [](const Dims& a, const Dims& b) {
    return a.N == b.N && a.L == b.L && a.S_total == b.S_total && a.E == b.E && a.H == b.H && a.G == b.G &&
           a.kdim == b.kdim && a.vdim == b.vdim;
  };
  for (Slot& slot : slots_)
    if (slot.kept && !same(slot.kept->dims, d)) slot.kept.reset(), slot.weights.reset();
}

void Computer::presize(const Snapshot& packed, const ForwardResult<float>& shown) {
  const Scenario& s = packed.scenario;
  const Dims& d = shown.dims;
  const std::vector<std::int64_t> key = {d.N,
                                         d.L,
                                         d.S_total,
                                         d.E,
                                         d.H,
                                         d.G,
                                         d.kdim,
                                         d.vdim,
                                         std::int64_t(shown.backend),
                                         std::int64_t(packed.mask_cells()),
                                         std::int64_t(s.mask.key_padding.size())};
  drop_kept(d);
  if (key == presized_ || shown.backend == Backend::gpu || s.has_model()) return;
  try {
    // Built into the Built the next job uses, with the spare mask storage, as run() does: no second
    // copy of the inputs and the mask (at L = 4096, 64 MiB of mask) is made to size the buffers.
    Built& b = builts_[last_built_ == 0 ? 1 : 0];
    if (spare_mask_) b.inputs.attn_mask = std::move(spare_mask_), spare_mask_.reset();
    struct GiveBack {  // the mask storage waits for the next job again, whatever happens
      Built& b;
      std::optional<Mask<float>>& spare;
      ~GiveBack() {
        if (b.inputs.attn_mask) spare = std::move(b.inputs.attn_mask);
        b.inputs.attn_mask.reset();
        b.inputs.key_padding_mask.reset();
      }
    } give_back{b, spare_mask_};
    build_forward_into(packed, b);
    b.options.backend = shown.backend;
    b.options.stages = kept_stages(packed, shown.backend);
    b.options.weights_overview = overview_block(packed, shown.backend);
    for (int k = 0; k < 2; ++k) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (job_ || quit_) return;  // the next job wants the worker; its forward sizes its own buffers
      }
      take_scratch((next_slot_ + k) % 3);
      reserve(b.config, b.weights, b.inputs, b.options, slots_[(next_slot_ + k) % 3].ws);
    }
    presized_ = key;
  } catch (const Error&) {
  } catch (const std::bad_alloc&) {
  }
}

}  // namespace mha::studio
