// "Check my implementation": a student's multi-head attention against the engine, case by case, and
// the mistake named. The case table, the reference (the engine's traced forward with the student's
// own weights), the comparison, the mask convention and the match against the mistake catalogue
// (engine/mistakes) all live here, with no GUI, so `mha check` and the app share them. The student's
// PyTorch module runs in a child Python (assets/check/check_runner.py) that only imports it, reads
// its weights and calls forward on the cases written here; tensors computed elsewhere are checked
// against a scenario without Python.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "errors.hpp"
#include "masks.hpp"
#include "mha.hpp"
#include "mistakes.hpp"
#include "scenario.hpp"

namespace mha::studio {

// ---- the case table ----

enum class CaseMask {
  none,
  causal,        // one (L, S) mask: query i sees keys j <= i
  per_batch,     // (N, L, S): a different mask for each batch item
  fully_masked,  // (N, L, S) causal, with one row of batch item 1 blocked at every key
};

struct CheckCase {
  std::string name;  // stable: "no_mask", "causal", ... (`mha check --json`)
  std::string what;  // one line for the table
  std::int64_t d_model = 0, num_heads = 0, batch = 0, tgt_len = 0, src_len = 0;
  bool cross = false;  // L != S: keys and values of their own (forward(query, key, value) only)
  CaseMask mask = CaseMask::none;
  Tensor<float> query, key, value;  // (N, L, E), (N, S, E), (N, S, E): three different tensors
  Tensor<float> blocked;            // (L, S) or (N, L, S), 1 = blocked; empty without a mask
};

// The cases every student runs: no mask; causal; per-batch masks that differ by batch item; cross-
// attention L != S; sizes where coincidences hide shape bugs (L = H, d_k = 1, N = 1); a fully masked
// row. Inputs are drawn from fixed seeds, the same on every run.
std::vector<CheckCase> check_cases();

// The three ways a mask is written: keep (1 = attend, the course's tril), block (torch's bool,
// True = blocked), additive (0 / -inf, added to the scores). Found from the student's outputs.
enum class Convention { keep, block, additive };
const char* to_string(Convention c);  // "keep", "block", "additive"

// ---- what a student's code gave ----

// A Python error: where it was raised in the student's file, and the case that triggered it.
struct PythonError {
  std::string stage;    // "import", "construct", "weights", "forward", "output"
  std::string type;     // "SyntaxError", "RuntimeError", ...
  std::string message;  // the exception's text
  std::string file;     // the student's file where the error is (the last frame in it), "" elsewhere
  int line = 0;
  std::string case_name;  // the case being run, "" outside forward
  std::string convention;
  std::string traceback;  // the whole traceback as Python prints it
};

// One run of the student's forward: on one case, with the mask written in one convention.
struct StudentRun {
  std::optional<Tensor<float>> output;   // (N, L, E) as returned
  std::optional<Tensor<float>> weights;  // the attention weights when forward returned them
  std::optional<PythonError> error;      // it raised (or returned something that is no tensor)
  std::string mask_form;                 // how the mask was passed: "(L, S)", "(N, L, S)", "(N, 1, L, S)"
};

// What the child Python found and ran, read from its result file.
struct StudentRuns {
  std::string class_name, constructor, signature;  // e.g. "MultiHeadAttention(d_model=12, num_heads=3)"
  std::string call_style;                          // "qkv": forward(Q, K, V[, mask]); "x": forward(x[, mask])
  bool takes_mask = false;
  std::vector<std::string> parameters;         // "W_q.weight (12, 12)", ...
  std::map<std::string, std::string> mapping;  // role (q, k, v, o, qkv) -> the student's name
  std::vector<std::string> notes;
  // Per (d_model, num_heads): the module's weights under torch's names (no out_proj: none found).
  std::map<std::pair<std::int64_t, std::int64_t>, Weights<float>> weights;
  // Per case name, per convention ("" for a case without a mask).
  std::map<std::string, std::map<std::string, StudentRun>> runs;
  std::optional<PythonError> error;  // it could not run at all (import, constructor, weights)
};

// ---- the report ----

enum class Verdict { correct, mistakes, unknown, error };
const char* to_string(Verdict v);  // "correct", "mistakes", "unknown", "error"

struct CaseReport {
  std::string name, what;
  bool ran = false;                  // false: not applicable to this forward (skipped says why)
  std::string skipped;               // why it did not run
  bool ok = false;                   // output (and weights, when returned) within tolerance of the reference
  double max_abs_diff = 0;           // over the rows compared; +inf when a value is NaN on one side only
  double weights_max_abs_diff = -1;  // -1: no weights compared
  std::string mask_form;             // how the mask went in
  std::string note;                  // e.g. what the fully masked row gave
  // For a view of the case: the engine's forward with the student's weights (its trace), and what
  // the student's code gave under the convention found. Null / empty when it did not run.
  std::shared_ptr<const ForwardResult<float>> reference;
  StudentRun yours;
};

struct CheckReport {
  Verdict verdict = Verdict::error;
  std::vector<Mistake> mistakes;         // verdict mistakes: the smallest set that explains every case
  std::optional<Convention> convention;  // found from the masked cases; nullopt: no masked case ran
  std::vector<CaseReport> cases;
  double atol = 0, rtol = 0;         // |theirs - reference| <= atol + rtol·|reference|
  std::string unknown_detail;        // verdict unknown: the first failing case, before/after softmax
  std::optional<PythonError> error;  // verdict error: why it could not run
  std::string error_message;         // verdict error: one line (also for errors with no Python)
  StudentRuns student;               // what was found (class, signature, mapping)
  std::vector<std::string> notes;
};

// The tolerance of every comparison (float32 on both sides, summed in different orders).
inline constexpr double kCheckAtol = 1e-4, kCheckRtol = 1e-4;

// Compares the runs with the engine: per case the reference with the student's weights, the
// convention that explains the masked cases best, and, when they differ, every single mistake and
// every compatible pair of the catalogue. `cases` are check_cases() (or a subset).
CheckReport diagnose(const std::vector<CheckCase>& cases, const StudentRuns& runs);

// ---- running the student's file ----

struct PythonCheckOptions {
  std::string python;                       // "" : $MHA_PYTHON, else /usr/bin/python3
  std::string runner;                       // "" : <assets>/check/check_runner.py
  std::string class_name;                   // --class: which nn.Module subclass
  std::map<std::string, std::string> map;   // --map: the student's name -> role (q, k, v, o, qkv)
  double timeout_s = 60;                    // the child is stopped past this
  std::atomic<int>* running_pid = nullptr;  // set while the child runs (the app can end it)
};

// Why the student's file could not be run at all, before any Python error: no Python, no torch,
// no runner, a hang. kind: "no_python", "no_torch", "no_runner", "timeout", "runner".
struct CheckRunError : Error {
  std::string kind;
  CheckRunError(std::string kind_, const std::string& message)
      : Error("python", message), kind(std::move(kind_)) {}
};

// Writes the cases into a temporary folder, runs the student's file there in a child Python with a
// time limit, reads back what it gave and diagnoses it. A Python error (import, constructor, forward)
// comes back as verdict error with the file, line and case; no Python or torch, a missing runner or
// a hang throws CheckRunError.
CheckReport check_python_file(const std::string& student_py, const PythonCheckOptions& options);

// ---- without Python ----

// Tensors the student computed (in any language) for a scenario's inputs and weights: `output`
// (N, L, E) and optionally `weights` (N, H, L, S') or head-averaged (N, L, S'). One case, the
// scenario; the catalogue is matched the same way. Throws mha::Error for a scenario that does not
// compute or tensors of the wrong shape.
CheckReport check_tensors(const Scenario& s, const Tensor<float>& output,
                          const std::optional<Tensor<float>>& weights);

// The report as `mha check --json` writes it: {"verdict", "mistakes", "mask_convention", "cases":
// [{"name", "ok", "max_abs_diff"}], ...}.
std::string report_json(const CheckReport& r);

// ---- Copy as PyTorch ----

// A runnable Python test file for the scenario: its inputs, its weights loaded into
// nn.MultiheadAttention, its masks, the expected output computed here and the tolerance; it checks
// torch against the expected output, and a student's module or function against both. Throws
// ConfigError for what torch's module cannot compute (grouped-query heads, a what-if).
std::string scenario_as_pytorch_test(const Scenario& s);

}  // namespace mha::studio
