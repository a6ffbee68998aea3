// Turns a Scenario into an engine forward. Small problems are computed at once; larger ones run on
// a worker thread so the UI stays responsive (the last result stays on screen, marked stale).
// The backend (auto / cpu / gpu) is the user's choice here, not the scenario's: it is this
// machine's property. GPU forwards run only on the worker thread (see Computer::set_device).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "history.hpp"
#include "model/language_model.hpp"
#include "model/roles.hpp"
#include "scenario.hpp"

namespace mha::studio {

// What a language model adds to a result: where the shown attention sits in the model, what the
// model predicts next, what each head does, and the same layer with untrained weights.
struct ModelResult {
  std::string name;
  std::int64_t layer = 0, n_layer = 0;
  ModelSizes sizes;                        // the model's family, heads, K/V groups and positions
  std::vector<TokenProb> top_k;            // next token after the sentence, best first
  std::vector<std::string> top_k_labels;   // their display pieces
  std::shared_ptr<const RoleTable> roles;  // every head of every layer (may be empty): the probes' scores
  std::vector<SentenceRole> sentence_roles;  // (n_layer, n_head), layer-major: on this sentence
  // Every layer's attention of the same run (n_layer of them; [layer] is Result::forward): the
  // Overview's layers × heads grid.
  std::vector<std::shared_ptr<const ForwardResult<float>>> layers;
  // This layer's attention on the same input (ln_1 of the residual stream) with nn.MultiheadAttention's
  // default init drawn from the scenario's seed: what the heads look like before training.
  std::shared_ptr<const ForwardResult<float>> untrained;
  // A model with rotary positions: the shown layer's scores from q and k before the rotation,
  // (H, T, T) (scores_without_rope), beside the trace's scores_scaled after it. Null without RoPE.
  std::shared_ptr<const Tensor<float>> scores_without_rope;
  // With knock-outs (Scenario::knockouts): the same forward without them, what Compare sets the
  // prediction against, and how far each head's pattern moved (every head of every layer).
  Knockouts knockouts;
  std::vector<TokenProb> top_k_before;
  std::vector<std::string> top_k_before_labels;
  std::vector<PatternChange> pattern_changes;
};

// A head's role for its title: the one this sentence shows ("prev-token 0.93"), else the probes'
// ("probe: induction 0.85", saying where it was measured), else "".
std::string head_role_label(const ModelResult& m, std::int64_t layer, std::int64_t head);
// Both measurements, one line each, for a tooltip.
std::string head_role_details(const ModelResult& m, std::int64_t layer, std::int64_t head);

struct Result {
  std::shared_ptr<const ForwardResult<float>> forward;  // null until the first success
  std::optional<ModelResult> model;                     // with a model: the layer shown is forward
  std::vector<std::string> query_tokens, key_tokens;
  std::uint64_t generation = 0;  // unique per result in the process: texture caches key on it
  double compute_ms = 0;
  bool mask_rows_only = false;      // a mask edit: only the rows it changed were recomputed
  bool heads_only = false;          // a weights edit: only the heads it moved were recomputed
  bool in_place = false;            // ... in the worker's kept buffers of an older result, none copied
  bool projections_reused = false;  // a value edit or a head-count change: q, k and v came from the last
                                    // result, only the rows whose inputs changed projected again
  // A mask edit's result: (N·L) flags of the query rows whose values may differ from those of
  // `changed_since` (the result it was computed from); every other row holds the same bits. Views
  // that drew that result redraw only these rows. changed_since_generation: that result's
  // generation, set by AppState when it was the one on screen (0: redraw everything).
  std::shared_ptr<const std::vector<char>> rows_changed;
  std::weak_ptr<const ForwardResult<float>> changed_since;
  std::uint64_t changed_since_generation = 0;
  bool valid() const { return forward != nullptr; }
};

// The engine inputs a scenario describes. Throws mha::Error (ConfigError, ShapeError, TooLargeError)
// naming the control to show the message next to. check_trace false: no TooLargeError for the
// full trace (the Large L view computes only q, k, v and row statistics on the GPU).
struct Built {
  Config config;
  Weights<float> weights;
  Inputs<float> inputs;
  Options options;
};
// With a model, the chosen layer's attention as one module: the same forward as the layer's.
Built build_forward(const Scenario& s, bool check_trace = true);
// The same into `b`, whose tensors' storage is reused where the sizes fit: the worker builds every
// job into one of two Builts in turn, so an edit at large sizes copies its inputs, weights and mask
// into memory already faulted in instead of allocating (and zeroing) 30 MB or more.
void build_forward_into(const Scenario& s, Built& b, bool check_trace = true);
// The same from a snapshot: its mask unpacked from bits straight into b's (no float copy of the
// scenario's cells is made).
void build_forward_into(const Snapshot& s, Built& b, bool check_trace = true);

// Above this many multiply-adds a recompute goes to the worker thread (a 60 Hz frame is 16 ms;
// the Eigen path does ≥ 1 GFLOP/s even on a slow core, so 2·10^6 MACs stay well inside a frame).
constexpr double kSyncWorkLimit = 2e6;
double forward_work(const Scenario& s);  // multiply-adds of one forward at the scenario's sizes

// The layer's mask with a model: the scenario's mask cells (a what-if) or the causal mask.
Mask<float> model_layer_mask(const Scenario& s, std::int64_t T);

// The Controls panel's backend choice. cpu: the path cpu_backend_for picks (the reference path up
// to kReferenceWorkLimit, then Eigen). auto: the same, but the engine may pick the GPU above its
// threshold (engine/gpu/gpu_backend.hpp). gpu: always the GPU path, falling back with the reason.
enum class BackendChoice { automatic, cpu, gpu };

class Computer {
 public:
  Computer();
  ~Computer();
  Computer(const Computer&) = delete;
  Computer& operator=(const Computer&) = delete;

  // Starts a forward of `state` (AppState's committed snapshot: the worker reads it while the UI
  // goes on editing its own scenario, and at large sizes holds its mask as bits, not floats). Small
  // ones finish before this returns; large ones replace any queued job on the worker (the newest
  // edit wins).
  void request(std::shared_ptr<const Snapshot> state);
  // A finished result or error, once; nullopt while nothing new is ready.
  struct Outcome {
    std::optional<Result> result;
    std::string error, error_argument;  // when the forward threw
    bool cancelled = false;             // a newer request stopped it: nothing to deliver
  };
  std::optional<Outcome> poll();
  bool busy() const { return busy_; }
  // The running forward's share done, 0 to 1 (0 when it does not say: a model, a mask edit, the GPU).
  double progress() const;
  // Forwards a newer request cancelled so far.
  std::uint64_t cancelled() const { return cancelled_; }
  // Not busy, and not pre-sizing workspaces either (see presize): a forward asked for now starts at
  // once. The --frame-stats replay waits for it after each size it loads, as a user reading the
  // new size would.
  bool settled() const { return !busy_ && !presizing_; }
  // Buffers the worker's workspaces have allocated so far (read it once settled()).
  std::int64_t allocations() const;
  // Waits until the worker is no longer busy (its result delivered, or nothing left to compute), at
  // most `ms` milliseconds; returns whether it is no longer busy.
  bool wait_idle(double ms);
  // Milliseconds a whole forward of `s` is expected to take on the worker: the cost model's work
  // (forward_work) at the rate of the worker's last whole forward; negative before the first. An
  // edit the worker recomputes in part (a mask cell, a head's weights) takes less.
  double expected_ms(const Scenario& s);
  // Called on the worker thread after a background result is ready, and again when the pre-sizing
  // after it ends (the app wakes its event loop with it, so the UI can sleep while a forward runs).
  // Set before the first request.
  std::function<void()> on_done;

  // The GPU path. GL contexts are current on one thread at a time, so the device is used only on
  // the worker thread, where its make_current binds the app's hidden shared context; with the gpu
  // choice every request goes to the worker, small ones included. Set before the first request.
  void set_device(DeviceForward* device, std::string description);
  const std::string& device_description() const { return device_description_; }
  void set_backend(BackendChoice c) { choice_ = c; }
  BackendChoice backend() const { return choice_; }
  // Milliseconds of the last forward each backend computed (reference, cpu, gpu); 0: none yet.
  struct BackendTimes {
    double reference_ms = 0, cpu_ms = 0, gpu_ms = 0;
  };
  BackendTimes times() const;
  // Joins the worker (idempotent; the destructor calls it). The app calls it before the device's
  // context goes away.
  void stop();

 private:
  struct Job {
    std::shared_ptr<const Snapshot> state;
    std::uint64_t seq;
  };
  // One of the worker's three sets of trace buffers, used in turn: while one result is on screen
  // and one is kept for the before/after comparison, the third's buffers are free to reuse (no
  // allocation per edit). `kept` is the worker's own copy of the result last computed into `ws`
  // (the same buffers; what it was computed from by id, and its weights), which the worker may
  // edit in place for a mask edit once the app has let go of the result it delivered
  // (mha::forward_mask_edit_in_place checks that nothing else holds the buffers). The app's views
  // keep weak references to delivered results: the copy is never delivered itself, so none of them
  // can see it change.
  // Ids of what a result was computed from: equal ids, equal values (see run).
  struct Ids {
    std::uint64_t inputs = 0;   // config, options and query, key, value (not masks nor weights)
    std::uint64_t weights = 0;  // the weights
  };
  struct Slot {
    Workspace<float> ws;
    std::shared_ptr<ForwardResult<float>> kept;
    Ids ids;                                        // kept's
    std::shared_ptr<const Weights<float>> weights;  // kept's (shared while they do not change)
  };
  // `slot` is null on the UI thread (small problems: allocation is cheap there), where the GPU
  // device is never used.
  Outcome run(const Snapshot& s, Slot* slot);
  // Lets go of the kept results of other sizes (their buffers would stay alive beside the new ones).
  void drop_kept(const Dims& d);
  Result run_model(const Scenario& s);
  void deliver(Outcome o, std::uint64_t seq);  // under mutex_
  void worker_loop();
  // After a result at sizes not seen before, the worker's other two workspaces are given that
  // result's buffers (mha::reserve) while it waits, the one the next job uses first; a queued job
  // stops it between workspaces. Without it the first two edits after a size change allocated and
  // faulted in a whole trace each (at L = 2048, twice as slow as later edits).
  void presize(const Snapshot& s, const ForwardResult<float>& shown);

  DeviceForward* device_ = nullptr;
  std::string device_description_ = "not built into this program";
  std::atomic<BackendChoice> choice_{BackendChoice::automatic};
  mutable std::mutex times_mutex_;
  BackendTimes times_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;  // notified when the worker stops being busy
  // Milliseconds per unit of forward_work of the worker's last whole forward (under mutex_).
  double ms_per_work_ = -1;
  std::optional<Job> job_;
  std::optional<Outcome> done_;
  std::atomic<bool> busy_{false};
  bool quit_ = false;
  bool running_ = false;             // the worker is computing a job (under mutex_)
  std::uint64_t requested_ = 0;      // sequence number of the newest request (UI thread only)
  std::uint64_t delivered_seq_ = 0;  // newest sequence delivered so far
  // The running forward's progress and cancel flag. A request for other sizes cancels it (its result
  // would be replaced by one of another shape at once); an edit at the same sizes lets it finish, so
  // a drag keeps showing results. running_sizes_: the running job's sizes (under mutex_).
  ForwardControl control_;
  std::atomic<std::uint64_t> cancelled_{0};
  std::vector<std::int64_t> running_sizes_;
  Slot slots_[3];
  int next_slot_ = 0;  // worker thread only
  // The slots compute one at a time, so they keep one scratch between them (mha::move_scratch): it is
  // in slots_[scratch_slot_] (-1: none yet). Worker thread only.
  int scratch_slot_ = -1;
  void take_scratch(int slot);  // moves the scratch to that slot before it computes
  // The worker's last result and the engine inputs it came from, masks left out: a job whose
  // inputs differ from those in the masks only (a mask cell or key padding edit) recomputes just
  // the query rows its mask changed: in place in its slot's kept result, the rows of the edits in
  // between copied from this one, or else from this one into new buffers (mha::forward_mask_edit).
  // Worker only.
  std::weak_ptr<const ForwardResult<float>> last_;
  // Two Builts used in turn: a job builds into the one its predecessor did not (last_built_ is the
  // predecessor's, -1 before any), copying into storage already there. The masks are left out of
  // the last one; their storage waits in spare_mask_ for the next job.
  Built builts_[2];
  int last_built_ = -1;
  std::optional<Mask<float>> spare_mask_;
  Ids last_ids_;
  std::uint64_t ids_ = 0;  // the last id handed out
  std::shared_ptr<const Weights<float>> last_weights_;
  std::vector<std::int64_t> presized_;  // the sizes the workspaces were last pre-sized for
  std::atomic<bool> presizing_{false};
  std::thread worker_;
};

}  // namespace mha::studio
