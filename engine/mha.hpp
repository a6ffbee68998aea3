// The public engine API: torch.nn.MultiheadAttention.forward (torch 1.13 semantics) for float and
// double, returning every intermediate as a Trace. Two paths fill the same trace: an explicit-loop
// reference (forward_reference.cpp) and the batched Eigen path (forward_eigen.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor.hpp"
#include "trace.hpp"

namespace mha {

// Module configuration, named as torch.nn.MultiheadAttention's constructor names it.
struct Config {
  std::int64_t embed_dim = 0;
  std::int64_t num_heads = 1;
  std::int64_t num_kv_heads = 0;  // grouped-query attention: G key/value heads; 0 means num_heads
  bool bias = true;               // in_proj_bias and out_proj.bias
  std::int64_t kdim = 0;          // key feature size; 0 means embed_dim
  std::int64_t vdim = 0;          // value feature size; 0 means embed_dim
  bool add_bias_kv = false;       // learned bias_k / bias_v rows appended to the keys and values
  bool add_zero_attn = false;     // a zero key/value row appended after the head split
  bool batch_first = true;        // (N, L, E) inputs; false: (L, N, E)
  // d_k when it is not embed_dim / num_heads (Hugging Face's head_dim): q_proj then maps E to H·d_k
  // and out_proj maps H·d_k back to E. 0 means embed_dim / num_heads, as torch's module has it.
  std::int64_t explicit_head_dim = 0;

  std::int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : num_heads > 0 ? embed_dim / num_heads : 0;
  }
  std::int64_t q_dim() const { return num_heads * head_dim(); }  // H·d_k: Dims::qdim
  std::int64_t kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  std::int64_t key_dim() const { return kdim > 0 ? kdim : embed_dim; }
  std::int64_t value_dim() const { return vdim > 0 ? vdim : embed_dim; }
  std::int64_t kv_embed_dim() const { return kv_heads() * head_dim(); }  // G * d_k
  // torch packs q, k, v into one in_proj_weight when kdim == vdim == embed_dim.
  bool qkv_same_embed_dim() const { return key_dim() == embed_dim && value_dim() == embed_dim; }
};

// Throws ConfigError for sizes that cannot work (embed_dim % num_heads, num_kv_heads ∤ num_heads, ...).
void validate(const Config& c);

// The module's parameters, under torch's state_dict names. Empty tensors are absent parameters.
template <class T>
struct Weights {
  Tensor<T> in_proj_weight;   // (H·d_k + 2·G·d_k, E): rows q, then k, then v (torch: (3E, E))
  Tensor<T> q_proj_weight;    // (H·d_k, E)    used instead when kdim or vdim differ from E
  Tensor<T> k_proj_weight;    // (G·d_k, kdim)
  Tensor<T> v_proj_weight;    // (G·d_k, vdim)
  Tensor<T> in_proj_bias;     // (H·d_k + 2·G·d_k,)
  Tensor<T> bias_k;           // (1, 1, G·d_k)  add_bias_kv
  Tensor<T> bias_v;           // (1, 1, G·d_k)
  Tensor<T> out_proj_weight;  // (E, H·d_k) state_dict name "out_proj.weight"
  Tensor<T> out_proj_bias;    // (E,)     state_dict name "out_proj.bias"
};

// The parameters under torch's state_dict names, in state_dict order: the one place that maps names
// to fields (file loaders, the app's weight editor).
template <class T>
std::vector<std::pair<const char*, Tensor<T>*>> state_dict(Weights<T>& w) {
  return {{"in_proj_weight", &w.in_proj_weight},
          {"q_proj_weight", &w.q_proj_weight},
          {"k_proj_weight", &w.k_proj_weight},
          {"v_proj_weight", &w.v_proj_weight},
          {"in_proj_bias", &w.in_proj_bias},
          {"bias_k", &w.bias_k},
          {"bias_v", &w.bias_v},
          {"out_proj.weight", &w.out_proj_weight},
          {"out_proj.bias", &w.out_proj_bias}};
}

// How a mask's values are to be read. torch accepts bool (True = not allowed) and float (added to
// the scores); uint8 is torch's deprecated spelling of bool for attn_mask.
enum class MaskDType { boolean, uint8, floating };
const char* mask_dtype_name(MaskDType d);

template <class T>
struct Mask {
  MaskDType dtype = MaskDType::boolean;
  Tensor<T> values;  // boolean/uint8: 0 or 1 (non-zero = blocked); floating: added to the scores
  // Or, for a boolean mask or a floating one of 0 and -inf cells only, the cells as bits (bit i of
  // word i / 64 set: cell i blocked, see pack_blocked): values.shape is then the mask's shape and
  // values.data is empty. 1/32 of the floats (at L = S = 4096, 2 MiB for 64); the merge with
  // key_padding_mask reads them a row at a time.
  std::vector<std::uint64_t> blocked;
};

// torch's only 3-D attn_mask layout is (N·num_heads, L, S), batch-major and head-minor. The course
// material passes (N, L, S), one mask per batch item shared by its heads; torch rejects that, so it
// is accepted here only when asked for explicitly.
enum class MaskLayout { torch, per_batch };

// What a query row whose every key is blocked gives. torch: NaN (softmax of all -inf). The course
// notebook maps that NaN to 0 instead, which is the `zero` choice.
enum class FullyMasked { nan, zero };

// reference: explicit loops; eigen ("cpu"): the batched Eigen path; gpu: GLSL compute shaders
// (mha_gpu, engine/gpu/), which the engine does not link: it runs only through Options::device;
// automatic ("auto"): the GPU when a device is given and prefers the problem's size, else eigen.
enum class Backend { reference, eigen, gpu, automatic };
const char* backend_name(Backend b);  // "reference", "cpu", "gpu", "auto"

namespace detail {
template <class T>
struct Problem;
template <class T>
struct Buffers;
}  // namespace detail
struct Dims;
struct StageTimes;

// A forward path outside the engine (mha_gpu's GpuBackend). It fills the same buffers as the CPU
// paths, so the trace is assembled by the same code. It computes in float32 only.
class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  virtual const char* name() const = 0;
  // Whether Backend::automatic should run a problem of these sizes here; full_trace: every stage is
  // to be read back (Options::stages empty). Called on the thread that then runs the forward; it
  // may look at the device first (GpuBackend asks GL its renderer).
  virtual bool prefers(const Dims& d, bool full_trace = true) = 0;
  // Fills every buffer as forward_reference does, or throws DeviceError (errors.hpp) with the
  // reason; the engine then computes on the CPU and reports that reason. A null buffer is a stage
  // nobody asked for (Options::stages): it stays null. `times`: null, or filled with the phase
  // times as the Eigen path fills them (Options::stage_times).
  virtual void forward(const detail::Problem<float>& p, detail::Buffers<float>& b, StageTimes* times) = 0;
};

// Where one Eigen forward spent its time, in milliseconds (filled through Options::stage_times). The
// phases inside the fused per-head loop run interleaved on several threads, so their wall time is
// split between them in proportion to the thread time each took; the six add up to the Eigen
// path's wall time (input checks, copies and the trace assembly are not in them).
struct StageTimes {
  double projections = 0;   // q, k, v in-projections and q / √d_k
  double scores = 0;        // per-head (q / √d_k)·kᵀ
  double mask_softmax = 0;  // raw scores (scaled·√d_k), + mask, softmax over keys
  double context = 0;       // weights·v, and the copy into concat
  double out_proj = 0;      // out-projection
  double average = 0;       // head-averaged weights
  double read_back = 0;     // device paths only: copying the stages into memory (not in the six)
  int threads = 0;          // threads the forward ran on
};

// A long forward's progress, and a way to stop it (the app's worker). The Eigen path sets total,
// adds each block of work it finishes to done, and throws Cancelled at its next block once cancel is
// set (the result is then not usable; the workspace is). The reference and GPU paths ignore it.
struct ForwardControl {
  std::atomic<bool> cancel{false};
  std::atomic<std::int64_t> done{0}, total{0};
};

struct Options {
  MaskLayout attn_mask_layout = MaskLayout::torch;
  FullyMasked fully_masked = FullyMasked::nan;
  Backend backend = Backend::eigen;
  // Refuse before allocating when the trace would need more; 0 means half of physical memory.
  std::uint64_t max_trace_bytes = 0;
  // Threads for the Eigen path: 0 means one per hardware thread. Problems too small to repay
  // starting a thread (teaching sizes) always run on the caller's thread.
  int threads = 0;
  // When set, the Eigen path overwrites it with its per-phase times (`mha bench`); null costs nothing.
  StageTimes* stage_times = nullptr;
  // The GPU path for Backend::gpu / automatic (mha_gpu's GpuBackend); null: gpu throws ConfigError.
  DeviceForward* device = nullptr;
  // Count NaN/Inf in the weights too (ForwardResult::nonfinite_inputs). A caller whose weights were
  // checked once when loaded (a model's layers, forwarded on every edit) turns it off.
  bool count_nonfinite_weights = true;
  // The stages the caller will read, by trace name (stage_names()); empty: every stage. The GPU path
  // then copies back only these and `output` (a view brings the tensor it views, and that tensor's
  // other views) and leaves the other stages out of the trace; the inputs and attn_mask are always
  // there. The CPU paths fill every stage anyway. An unknown name is a ConfigError.
  std::vector<std::string> stages;
  // A what-if, not torch's computation: q is divided by this instead of √d_k (0: √d_k, torch's). The
  // app's temperature and "scale off" controls set it. Computed on the reference and Eigen paths only
  // (the GPU path's shaders divide by √d_k: a GPU forward falls back with the reason).
  double score_divisor = 0;
  // Progress and cancellation (see ForwardControl); null: neither, at no cost.
  ForwardControl* control = nullptr;
  // A weights overview (ForwardResult::overview) with this many keys to a column (0: none): what a
  // view of every head needs at sizes where attn_weights itself is not kept (4·H·L·S' bytes). The
  // Eigen path computes it from each weights row while the fused loop has it in cache; the
  // reference and GPU paths leave it empty.
  std::int64_t weights_overview = 0;
};

// Rotary position embedding (RoPE) as Hugging Face's Llama applies it, between the in-projections
// and the scores: each head's row of q or k at position p becomes x·cos[p] + rotate_half(x)·sin[p],
// rotate_half(x) = cat(-x[d_k/2:], x[:d_k/2]). Query i and key j sit at positions i and j. Not part
// of torch's nn.MultiheadAttention: the trace then holds q and k before (q, k) and after (q_rot,
// k_rot) the rotation, and the heads read the rotated ones.
template <class T>
struct Rotary {
  Tensor<T> cos, sin;  // (P, d_k), P ≥ max(L, S): row p is position p's cat(freqs, freqs).cos() / .sin()
};

template <class T>
struct Inputs {
  Tensor<T> query;                          // (N, L, E) batch_first, (L, N, E) otherwise, or unbatched (L, E)
  Tensor<T> key;                            // (N, S, kdim) likewise
  Tensor<T> value;                          // (N, S, vdim) likewise
  std::optional<Mask<T>> attn_mask;         // (L, S), (N·H, L, S), or per_batch (N, L, S)
  std::optional<Mask<T>> key_padding_mask;  // (N, S); unbatched (S,)
  std::optional<Rotary<T>> rotary;          // RoPE on q and k (Llama-family models); none: torch's module
};

// Sizes after the input checks; S_total = S + add_bias_kv + add_zero_attn (torch's final src_len).
struct Dims {
  std::int64_t N = 0, L = 0, S = 0, S_total = 0, E = 0, H = 0, G = 0, d_k = 0, kdim = 0, vdim = 0;
  bool batched = true;
  // The width of q, of the heads side by side and of out_proj's input: E unless
  // Config::explicit_head_dim makes the heads narrower or wider.
  std::int64_t qdim() const { return H * d_k; }
};

// What Options::weights_overview asks of a forward: each attention-weights row pooled to `columns`
// values and checked, for a view that shows every head without holding (N, H, L, S') values.
// Every value equals what the same reduction of the full trace's attn_weights and attn_weights_avg
// gives, bit for bit.
template <class T>
struct WeightsOverview {
  std::int64_t block = 0;    // keys per column: column c is keys [c·block, (c+1)·block) (0: no overview)
  std::int64_t columns = 0;  // ceil(S' / block)
  // (N, H, L, columns): the largest weight of row (n, h, i) over column c's keys; NaN for a NaN row.
  std::shared_ptr<const std::vector<T>> weights;
  std::shared_ptr<const std::vector<T>> average;  // (N, L, columns): the same of attn_weights_avg
  // (N, H + 1, L, 4): weights_check::check_row of each row of every head, then of the head average
  // (checked without the mask, as the average has none): entropy in bits, log2 of the keys the row
  // may see, |row sum - 1|, and the row's kind (0 ordinary, 1 NaN, 2 all zero).
  std::shared_ptr<const std::vector<T>> checks;
  bool valid() const { return block > 0; }
};

template <class T>
struct ForwardResult {
  Trace<T> trace;  // every stage, batch-first and batched (N = 1 for unbatched input)
  Dims dims;
  Config config;
  Backend backend = Backend::eigen;             // the path that computed it (never automatic)
  FullyMasked fully_masked = FullyMasked::nan;  // the policy this result was computed with
  double score_divisor = 0;                     // Options::score_divisor it was computed with
  std::int64_t fully_masked_rows = 0;           // (n, h, i) rows whose every key was blocked
  std::int64_t nonfinite_inputs = 0;            // NaN/Inf values found in the inputs and weights
  std::vector<std::string> warnings;            // e.g. torch's uint8-mask deprecation
  std::string fallback_reason;  // the GPU was chosen but failed, so the CPU computed this: why
  WeightsOverview<T> overview;  // Options::weights_overview's (empty unless asked, on the Eigen path)

  // The module's return values, in the input's own layout, as torch returns them.
  Tensor<T> output() const;                                 // like query
  Tensor<T> attn_weights(bool average_attn_weights) const;  // (N,H,L,S') or averaged (N,L,S')
};

// Bytes the trace of a forward at these sizes would hold (what max_trace_bytes is checked against).
std::uint64_t trace_bytes(const Dims& d, std::size_t scalar_size, bool has_mask);
// Throws TooLargeError, naming the bytes needed, when that exceeds max_trace_bytes (0: half of RAM).
void check_trace_fits(const Dims& d, std::size_t scalar_size, bool has_mask, std::uint64_t max_trace_bytes);
// The same check for `need` bytes (a forward that keeps fewer stages: Options::stages).
void check_bytes_fit(const Dims& d, std::uint64_t need, std::uint64_t max_trace_bytes);
// The sizes a batch-first forward of this config would have (used before inputs exist).
Dims dims_for(const Config& c, std::int64_t N, std::int64_t L, std::int64_t S);

// Up to this many multiply-adds (cost::forward_work; the course notebook is ~4·10^3) a CPU forward
// runs on the reference path: it takes microseconds there and rounds as torch does, so the numbers
// meet the notebook's own tolerance (atol 1e-8) with room to spare.
constexpr double kReferenceWorkLimit = 2e5;
// The CPU path for a forward of `work` multiply-adds: reference up to kReferenceWorkLimit, else
// Eigen. What the app computes on and what `mha compute` runs when no --backend is given.
Backend cpu_backend_for(double work);

// Checks every input against the config and returns the sizes; throws ShapeError/DtypeError/ConfigError.
template <class T>
Dims check_inputs(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o);

// One forward pass. Throws the errors in errors.hpp, never crashes on bad input.
template <class T>
ForwardResult<T> forward(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o = {});

namespace detail {
template <class T>
struct WorkspaceState;
}

// Buffers kept between forwards, so that recomputing after an edit at unchanged sizes allocates
// none of the trace's tensors. A result computed into a workspace shares storage with it: its trace
// points into the workspace's buffers. The next forward into the same workspace reuses a buffer
// only when the workspace holds the only reference to it; a buffer that an earlier result (or a
// copy of a Stage) still holds is left alone and a new one is allocated. So nothing a caller still
// holds is ever overwritten; to get the reuse, let go of the previous result, which the forward
// overload below does for the result it is given. Not for use by two threads at once.
template <class T>
class Workspace {
 public:
  Workspace() noexcept;
  ~Workspace();
  Workspace(const Workspace&);  // a copy starts empty: two workspaces never share buffers
  Workspace& operator=(const Workspace&);
  Workspace(Workspace&&) noexcept;
  Workspace& operator=(Workspace&&) noexcept;

  // Buffers allocated so far; a forward that reused every buffer adds none.
  std::int64_t allocations() const;
  detail::WorkspaceState<T>& state();  // the engine's access; made on first use

 private:
  std::unique_ptr<detail::WorkspaceState<T>> state_;  // null until the first forward
};

// Hands `from`'s scratch (the Eigen path's per-thread blocks, the products' packed operands and
// q / √d_k, which no result holds) to `to`, which lets go of its own. Workspaces that never compute at the
// same time (the app's worker's three) can so keep one scratch between them, moved to the one about to
// compute.
template <class T>
void move_scratch(Workspace<T>& from, Workspace<T>& to);

// Whether nothing but `r` and `ws` (the workspace r was computed into) holds any of r's buffers:
// the next forward into `ws` then allocates nothing, and an edit in place may change them.
template <class T>
bool held_alone(const ForwardResult<T>& r, Workspace<T>& ws);

// The same forward, computed into `result` with `ws`'s buffers: the inputs are checked first (on an
// error `result` is untouched), then `result` is released and recomputed, reusing every buffer of
// unchanged size that nobody else holds (see Workspace). Returns `result`.
template <class T>
ForwardResult<T>& forward(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                          Workspace<T>& ws, ForwardResult<T>& result);

// A forward after an edit of the inputs (query, key, value): `base` is a result of the Eigen path
// for the same module with the weights `was`, whose inputs may differ from `in` in some rows (a
// value edit), or in none (a head-count change that keeps E and G·d_k leaves q, k and v as they
// were). q, k and v are copied from base and only the rows whose inputs differ are projected
// again, with the digits a whole projection gives them; everything after the projections is
// computed as forward does (the masks, the head count and the stages kept may differ from base's).
// Every value equals forward's bit for bit. Where base does not qualify (another backend or
// projection shapes, other in-projection weights), it runs forward. Returns whether it started from
// base. `base` is only read, shares nothing with the result, and may not be `result`.
template <class T>
bool forward_inputs_edit(const Config& c, const Weights<T>& w, const Weights<T>& was, const Inputs<T>& in,
                         const Options& o, const ForwardResult<T>& base, Workspace<T>& ws,
                         ForwardResult<T>& result);

// A forward after an edit of the masks only: `base` is a result of the Eigen path for the same
// config, weights, query, key, value and options, and `in`'s attn_mask / key_padding_mask may differ
// from those it was computed with. Only the query rows whose merged mask changed are recomputed
// (their scores_masked, weights, context, concat, output and head average rows, every head); every
// other value is copied from `base` into `ws` (`base` is only read, and shares nothing with the result).
// Every value equals a full forward's bit for bit (same kernels, blocks and threads). Where that
// does not apply (another backend or sizes, masks added, removed or broadcast differently) it runs
// the full forward instead. Returns whether it recomputed rows only. The caller vouches that the
// weights and inputs other than the masks are those of `base`; it is not checked.
// `rows_changed`: null, or set to (N·L) flags of the query rows whose values may differ from base's
// when rows alone were recomputed (what a view redraws).
template <class T>
bool forward_mask_edit(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                       const ForwardResult<T>& base, Workspace<T>& ws, ForwardResult<T>& result,
                       std::vector<char>* rows_changed = nullptr);

// The same mask edit applied to `r` itself: `r` is such a result, and nothing but `r` and `ws` (the
// workspace it was computed into) holds its buffers; the app's worker keeps the result
// of two edits before, which nothing shows any more. The query rows whose merged mask differs from
// the one `r` holds are recomputed in r's own buffers, and its mask rows replaced: no stage is
// copied. Every value equals a full forward's bit for bit, as with forward_mask_edit. Returns
// false, with `r` untouched, where it does not apply (what forward_mask_edit would compute in full,
// or a buffer of r held elsewhere); the caller then computes it another way. What find_stage had
// computed for `r` is dropped. The caller vouches that the other inputs are r's, as above. If it
// throws after the checks (out of memory), `r` is half edited: let it go.
// `newest`: null, or a result of the same problem computed after `r` (the one on screen), only
// read. r's rows that differ from newest's but not from the new masks are then copied from it, and
// only the rows the new masks change from newest's are recomputed: r catches up on the edits in
// between without computing them again. `rows_changed`: null, or set to (N·L) flags of the query
// rows whose values may differ from newest's (without newest: from r's before the edit).
template <class T>
bool forward_mask_edit_in_place(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o,
                                Workspace<T>& ws, ForwardResult<T>& r,
                                const ForwardResult<T>* newest = nullptr,
                                std::vector<char>* rows_changed = nullptr);

// A forward after an edit of the weights that leaves some heads alone, in place: `r` is a result of
// the Eigen path for the same config, inputs and options with the weights `was` (the caller vouches
// for the inputs; the masks are compared with r's merged mask, and must be the same), and nothing
// but `r` and `ws` holds its buffers (as forward_mask_edit_in_place). The in-projections are redone
// (every head: they are cheap next to the attention), then the scores, weights and context of only
// the heads whose weights changed (a row of W_q or b_q: its head; of W_k, W_v, their biases, bias_k
// or bias_v: every head reading that key/value head), the head average from every head's weights,
// and the output. An out_proj edit redoes the output alone. Every value equals a full forward's bit
// for bit. Returns false, `r` untouched, where that does not apply (every head changed, other
// masks, sizes or options, the head average kept without the weights, a buffer held elsewhere); the
// caller then runs a full forward. `heads_changed`: null, or set to (H) flags of the heads redone.
// If it throws after the checks (out of memory), `r` is half edited: let it go.
template <class T>
bool forward_weights_edit_in_place(const Config& c, const Weights<T>& w, const Weights<T>& was,
                                   const Inputs<T>& in, const Options& o, Workspace<T>& ws,
                                   ForwardResult<T>& r, std::vector<char>* heads_changed = nullptr);

// Trace on demand. A forward whose Options::stages leaves out the (N, H, L, S') stages (scores,
// scores_scaled, scores_masked, attn_weights) or attn_weights_avg keeps no L×S array: the Eigen path
// runs its fused loop through q, k, v, context and concat as always and writes only the output.
// stage_rows() then computes rows [i0, i0 + rows) of one such stage for batch item n and head h
// (h is ignored for attn_weights_avg, which sums every head) from the q, k, v and merged mask the
// result holds: (rows, S'). The kernels, blocks and thread-local arithmetic are the forward's, so
// every value equals the full trace's bit for bit; a result that holds the stage gives the same
// values. Eigen-path results only (the reference and GPU paths fill every stage they are asked
// for); throws ConfigError for another backend, an unknown stage or indices outside the trace.
template <class T>
Tensor<T> stage_rows(const ForwardResult<T>& r, const std::string& stage, std::int64_t n, std::int64_t h,
                     std::int64_t i0, std::int64_t rows);
// The stages stage_rows() computes.
const std::vector<std::string>& on_demand_stages();
// A stage of the result by name: the trace's own, or one the forward left out (Trace::left_out)
// that stage_rows() can compute, computed whole, (N, H, L, S') or (N, L, S') for attn_weights_avg,
// on the first call and kept with the trace (two threads share the heads at large sizes). Null
// when neither applies (an unknown name, a left-out stage of a GPU result, or a stage too large
// for the memory guard or for the memory there is). What views call:
// they compute only the stage on screen. compute false: only what is already there (null
// otherwise), never waiting for a computation on another thread. Safe to call from several
// threads.
template <class T>
const Stage<T>* find_stage(const ForwardResult<T>& r, const std::string& name, bool compute = true);
// Level of detail for a zoomed-out map of one such stage: (out_rows, out_cols), each the max or the
// mean of the block×block patch of stage[n, h] from (i0 + r·block, j0 + c·block), clipped at L and
// S' (a ragged edge block reduces the cells it has); a patch holding a NaN is NaN. Rows come from
// stage_rows a few task blocks at a time, so at most max(block, 128) rows of S' values exist at
// once, whatever L is. block 1 gives stage_rows' cells. GpuBackend::weights_blocks is the same on
// the GPU. Throws ConfigError as stage_rows does, or for blocks outside the stage.
enum class BlockReduce { max, mean };
template <class T>
Tensor<T> stage_blocks(const ForwardResult<T>& r, const std::string& stage, std::int64_t n, std::int64_t h,
                       std::int64_t i0, std::int64_t j0, std::int64_t block, std::int64_t out_rows,
                       std::int64_t out_cols, BlockReduce reduce);

// Makes `ws` hold every buffer a forward of these arguments into it would need, without computing:
// a buffer within 2× of the size is kept (and one a result still holds is left untouched: the next
// forward reuses it once that result is let go), the others are replaced by new zero-filled ones,
// so their pages are faulted in here and not in the next forward.
// The app calls it on a size change, so the first edits at the new size are as fast as the later
// ones. Checks the inputs as forward does (and throws the same errors); computes nothing.
template <class T>
void reserve(const Config& c, const Weights<T>& w, const Inputs<T>& in, const Options& o, Workspace<T>& ws);

// The course's API shapes, in C++. Weights start from torch's default initialisation drawn from
// torch.manual_seed(seed); replace them through weights().
template <class T>
class MultiHeadAttention {
 public:
  MultiHeadAttention(std::int64_t d_model, std::int64_t num_heads, bool bias = true, std::uint64_t seed = 0);
  // Q, K, V: (batch, seq_len, d_model). The mask follows torch (True = blocked) unless `options()`
  // says otherwise; convert the other convention with mask_from_keep() first.
  Tensor<T> forward(const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V,
                    const std::optional<Mask<T>>& mask = std::nullopt);
  Tensor<T> forward(const Tensor<T>& x, const std::optional<Mask<T>>& mask = std::nullopt);

  Weights<T>& weights() { return weights_; }
  Options& options() { return options_; }
  const Config& config() const { return config_; }
  const ForwardResult<T>& last() const { return last_; }  // the trace of the last forward

 private:
  Config config_;
  Weights<T> weights_;
  Options options_;
  Workspace<T> workspace_;  // each forward recomputes last_ in place, reusing its buffers
  ForwardResult<T> last_;
};

// The notebook's free function: (batch, seq_len, d_model) in and out, with explicit weights.
template <class T>
Tensor<T> multi_head_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                               std::int64_t num_heads, std::int64_t d_model, const Weights<T>& weights,
                               const std::optional<Mask<T>>& mask = std::nullopt,
                               const Options& options = {});

}  // namespace mha
