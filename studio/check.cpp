// The checker: the case table, the child Python that runs the student's module, and the diagnosis
// (reference with the student's weights, comparison, mask convention, mistake catalogue).
#include "check.hpp"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compute.hpp"
#include "data_dir.hpp"
#include "errors.hpp"
#include "io/npy.hpp"
#include "io/state_dict.hpp"
#include "subprocess.hpp"
#include "torch_rng.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace mha::studio {

// ---- the case table ----

namespace {

Tensor<float> draw(TorchGenerator& gen, const Shape& shape) {
  Tensor<float> t(shape);
  gen.uniform_(t, -3.0, 3.0);  // wide enough that a wrong scale or mask moves the softmax visibly
  return t;
}

// (L, S) causal, 1 = blocked.
std::vector<float> causal_cells(std::int64_t L, std::int64_t S) {
  std::vector<float> c(std::size_t(L * S), 0.f);
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = i + 1; j < S; ++j) c[std::size_t(i * S + j)] = 1.f;
  return c;
}

CheckCase make_case(const char* name, const char* what, std::int64_t E, std::int64_t H, std::int64_t N,
                    std::int64_t L, std::int64_t S, CaseMask mask, std::uint64_t seed) {
  CheckCase c;
  c.name = name;
  c.what = what;
  c.d_model = E;
  c.num_heads = H;
  c.batch = N;
  c.tgt_len = L;
  c.src_len = S;
  c.cross = L != S;
  c.mask = mask;
  TorchGenerator gen(seed);
  c.query = draw(gen, {N, L, E});
  c.key = draw(gen, {N, S, E});
  c.value = draw(gen, {N, S, E});
  const std::vector<float> causal = causal_cells(L, S);
  switch (mask) {
    case CaseMask::none: break;
    case CaseMask::causal: c.blocked = Tensor<float>({L, S}, causal); break;
    case CaseMask::per_batch:
      // Item 0 causal, item 1 with its last keys padded, further items alternating: masks that
      // differ by batch item, so that a mask read for the wrong item shows.
      c.blocked = Tensor<float>({N, L, S});
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t i = 0; i < L; ++i)
          for (std::int64_t j = 0; j < S; ++j)
            c.blocked.data[std::size_t((n * L + i) * S + j)] =
                n % 2 == 0 ? causal[std::size_t(i * S + j)] : float(j >= S - 1 - n);
      break;
    case CaseMask::fully_masked:
      c.blocked = Tensor<float>({N, L, S});
      for (std::int64_t n = 0; n < N; ++n)
        std::copy(causal.begin(), causal.end(), c.blocked.data.begin() + n * L * S);
      for (std::int64_t j = 0; j < S; ++j) c.blocked.data[std::size_t(((N - 1) * L + 2) * S + j)] = 1.f;
      break;
  }
  return c;
}

}  // namespace

std::vector<CheckCase> check_cases() {
  // d_model 12 with 3 heads (d_k = 4) everywhere but head_dim_1: H, d_k, L and N all differ, so no
  // reshape mistake hides behind equal sizes.
  return {
      make_case("no_mask", "no mask, N=2 L=S=5", 12, 3, 2, 5, 5, CaseMask::none, 11),
      make_case("causal", "causal (L, S) mask, N=2 L=S=5", 12, 3, 2, 5, 5, CaseMask::causal, 12),
      make_case("per_batch", "(N, L, S) masks that differ by batch item, N=2 L=S=5", 12, 3, 2, 5, 5,
                CaseMask::per_batch, 13),
      make_case("cross_attention", "cross-attention L=4, S=6, no mask", 12, 3, 2, 4, 6, CaseMask::none, 14),
      make_case("len_equals_heads", "L = S = H = 3, causal", 12, 3, 2, 3, 3, CaseMask::causal, 15),
      make_case("head_dim_1", "d_k = 1 (d_model=4, 4 heads), causal", 4, 4, 2, 5, 5, CaseMask::causal, 16),
      make_case("batch_1", "N = 1, causal", 12, 3, 1, 5, 5, CaseMask::causal, 17),
      make_case("fully_masked_row", "(N, L, S) causal, row 2 of item 1 fully masked", 12, 3, 2, 4, 4,
                CaseMask::fully_masked, 18),
  };
}

const char* to_string(Convention c) {
  switch (c) {
    case Convention::keep: return "keep";
    case Convention::block: return "block";
    case Convention::additive: return "additive";
  }
  return "?";
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::correct: return "correct";
    case Verdict::mistakes: return "mistakes";
    case Verdict::unknown: return "unknown";
    case Verdict::error: return "error";
  }
  return "?";
}

// ---- diagnosis ----

namespace {

constexpr Convention kConventions[] = {Convention::keep, Convention::block, Convention::additive};

// One case ready to compare: the reference, its variants' inputs, the rows compared, what ran.
struct Prepared {
  std::string name, what;
  std::string skipped;
  bool masked = false;
  ForwardResult<float> ref;
  // The same forward with FullyMasked::zero: a variant's fully masked softmax row (or column) is NaN
  // in torch and 0 in the course notebook's code; a student may do either.
  ForwardResult<float> ref_zero;
  Weights<float> weights;
  std::vector<char> row_ok;  // (N·L): rows whose every head sees some key (a fully masked row is
                             // NaN in torch, 0 in the notebook, a mean with -1e9: all are accepted)
  std::map<std::string, StudentRun> runs;                   // by convention name ("" unmasked)
  std::map<std::uint32_t, VariantForward<float>> variants;  // by MistakeSet bits · 2 + zero policy
  void set_reference(ForwardResult<float> r) {
    ref = std::move(r);
    ref_zero = ref;
    ref_zero.fully_masked = FullyMasked::zero;
  }
};

struct Diff {
  bool ok = true;
  double max_abs = 0;
};

bool close(float got, float want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(double(got) - double(want)) <= kCheckAtol + kCheckRtol * std::fabs(double(want));
}

// got vs want, both (rows, width) with row r compared when row_ok(r).
template <class RowOk>
Diff compare(const std::vector<float>& got, const std::vector<float>& want, std::int64_t width,
             RowOk row_ok) {
  Diff d;
  if (got.size() != want.size()) return {false, std::numeric_limits<double>::infinity()};
  for (std::size_t e = 0; e < got.size(); ++e) {
    if (!row_ok(std::int64_t(e) / width)) continue;
    const float g = got[e], w = want[e];
    if (!close(g, w)) d.ok = false;
    if (std::isfinite(g) && std::isfinite(w))
      d.max_abs = std::max(d.max_abs, std::fabs(double(g) - double(w)));
    else if (!(std::isnan(g) && std::isnan(w)) && g != w)
      d.max_abs = std::numeric_limits<double>::infinity();
  }
  return d;
}

struct RunDiff {
  Diff output, weights;
  bool weights_compared = false;
  bool ok() const { return output.ok && (!weights_compared || weights.ok); }
};

// The student's run against a variant (the empty set: the reference), its fully masked softmax rows
// NaN (zero_policy false) or 0.
RunDiff compare_run_policy(Prepared& p, const StudentRun& run, MistakeSet set, bool zero_policy) {
  const std::uint32_t key = set.bits * 2 + zero_policy;
  auto it = p.variants.find(key);
  if (it == p.variants.end())
    it = p.variants.emplace(key, mistaken_forward(zero_policy ? p.ref_zero : p.ref, p.weights, set)).first;
  const VariantForward<float>& v = it->second;
  const Dims& d = p.ref.dims;
  RunDiff r;
  r.output =
      compare(run.output->data, v.output, d.E, [&](std::int64_t row) { return p.row_ok[std::size_t(row)]; });
  if (run.weights) {
    const Tensor<float>& w = *run.weights;
    if (w.shape == Shape{d.N, d.H, d.L, d.S_total}) {
      r.weights_compared = true;
      r.weights = compare(w.data, v.weights, d.S_total, [&](std::int64_t row) {
        return p.row_ok[std::size_t((row / (d.H * d.L)) * d.L + row % d.L)];
      });
    } else if (w.shape == Shape{d.N, d.L, d.S_total}) {  // averaged over the heads
      std::vector<float> avg(std::size_t(d.N * d.L * d.S_total), 0.f);
      for (std::int64_t n = 0; n < d.N; ++n)
        for (std::int64_t h = 0; h < d.H; ++h)
          for (std::int64_t e = 0; e < d.L * d.S_total; ++e)
            avg[std::size_t(n * d.L * d.S_total + e)] +=
                v.weights[std::size_t((n * d.H + h) * d.L * d.S_total + e)] / float(d.H);
      r.weights_compared = true;
      r.weights =
          compare(w.data, avg, d.S_total, [&](std::int64_t row) { return p.row_ok[std::size_t(row)]; });
    }
  }
  return r;
}

RunDiff compare_run(Prepared& p, const StudentRun& run, MistakeSet set) {
  const RunDiff nan = compare_run_policy(p, run, set, false);
  if (nan.ok()) return nan;
  const RunDiff zero = compare_run_policy(p, run, set, true);
  return zero.ok() || zero.output.max_abs < nan.output.max_abs ? zero : nan;
}

// The run of a case under a convention (unmasked cases have one run, under "").
const StudentRun* run_for(const Prepared& p, std::optional<Convention> c) {
  const auto it = p.runs.find(p.masked && c ? to_string(*c) : "");
  return it == p.runs.end() ? nullptr : &it->second;
}

// What the student's fully masked rows hold, for the case's note: NaN (torch), the output of all-zero
// weights (the notebook's NaN -> 0), or something else (a -1e9 fill averages every key).
std::string fully_masked_note(Prepared& p, const StudentRun& run) {
  const Dims& d = p.ref.dims;
  const std::uint32_t key = MistakeSet{}.bits * 2 + 1;
  auto zero = p.variants.find(key);
  if (zero == p.variants.end())
    zero = p.variants.emplace(key, mistaken_forward(p.ref_zero, p.weights, {})).first;
  int nan = 0, zeros = 0, other = 0;
  for (std::int64_t row = 0; row < d.N * d.L; ++row) {
    if (p.row_ok[std::size_t(row)]) continue;
    for (std::int64_t e = 0; e < d.E; ++e) {
      const std::size_t at = std::size_t(row * d.E + e);
      const float v = run.output->data[at];
      std::isnan(v) ? ++nan : close(v, zero->second.output[at]) ? ++zeros : ++other;
    }
  }
  if (nan + zeros + other == 0) return "";
  if (zeros == 0 && other == 0) return "the fully masked row is NaN, as torch gives";
  if (nan == 0 && other == 0) return "the fully masked row has weights 0, as the course notebook makes them";
  return "the fully masked row is neither NaN nor from weights 0 (a -1e9 fill averages every key)";
}

void python_error_line(CheckReport& r, const PythonError& e) {
  std::string where = e.file.empty() ? "" : e.file + ":" + std::to_string(e.line) + ": ";
  std::string context;
  if (!e.case_name.empty())
    context = " (case " + e.case_name + (e.convention.empty() ? "" : ", mask as " + e.convention) + ")";
  r.error_message = where + e.type + ": " + e.message + context;
}

CheckReport diagnose_prepared(std::vector<Prepared>& cases, MistakeSet forced, const StudentRuns& student) {
  CheckReport r;
  r.atol = kCheckAtol;
  r.rtol = kCheckRtol;
  r.student = student;
  if (forced.has(Mistake::no_output_projection))
    r.notes.push_back(
        "no output projection found among the parameters: the output is the concatenated heads");

  // A case whose every run raised cannot be diagnosed: that error is the verdict.
  bool any_masked = false;
  for (Prepared& p : cases) {
    if (!p.skipped.empty()) continue;
    bool some_ran = false;
    const PythonError* first = nullptr;
    for (const auto& [conv, run] : p.runs) {
      if (!run.error) some_ran = true;
      if (run.error && (!first || conv == "keep")) first = &*run.error;
    }
    if (!some_ran && first) {
      r.verdict = Verdict::error;
      r.error = *first;
      python_error_line(r, *first);
      if (p.masked) r.error_message += "; it raised with the mask in each of keep, block and additive";
      return r;
    }
    any_masked = any_masked || (p.masked && some_ran);
  }
  std::vector<std::optional<Convention>> conventions;
  if (any_masked)
    conventions.assign(std::begin(kConventions), std::end(kConventions));
  else
    conventions.push_back(std::nullopt);
  // A convention under which some case raised is not the student's.
  const auto usable = [&](std::optional<Convention> c) {
    for (Prepared& p : cases) {
      if (!p.skipped.empty()) continue;
      const StudentRun* run = run_for(p, c);
      if (!run || run->error || !run->output) return false;
    }
    return true;
  };
  // Whether every case matches the variant `set` under convention c; the largest difference.
  const auto matches = [&](std::optional<Convention> c, MistakeSet set, double* worst) {
    double w = 0;
    for (Prepared& p : cases) {
      if (!p.skipped.empty()) continue;
      const RunDiff d = compare_run(p, *run_for(p, c), set);
      if (!d.ok()) return false;
      w = std::max(w, d.output.max_abs);
    }
    if (worst) *worst = w;
    return true;
  };

  std::optional<std::optional<Convention>> chosen;
  MistakeSet found;
  bool explained = false;
  if (forced.empty())
    for (std::optional<Convention> c : conventions)
      if (usable(c) && matches(c, {}, nullptr)) {
        chosen = c;
        explained = true;
        break;
      }
  if (!explained) {
    std::vector<MistakeSet> sets;
    if (!forced.empty()) sets.push_back(forced);
    for (MistakeSet s : singles_and_pairs()) {
      MistakeSet with = s;
      with.bits |= forced.bits;
      if (compatible(with) && with.list().size() <= 2 &&
          std::find(sets.begin(), sets.end(), with) == sets.end())
        sets.push_back(with);
    }
    std::stable_sort(sets.begin(), sets.end(),
                     [](MistakeSet a, MistakeSet b) { return a.list().size() < b.list().size(); });
    double best_worst = std::numeric_limits<double>::infinity();
    std::size_t best_size = 0;
    for (MistakeSet s : sets) {
      if (explained && s.list().size() > best_size) break;  // a smaller set already explains it
      for (std::optional<Convention> c : conventions) {
        double worst = 0;
        if (usable(c) && matches(c, s, &worst) && worst < best_worst) {
          best_worst = worst;
          best_size = s.list().size();
          chosen = c;
          found = s;
          explained = true;
        }
      }
    }
  }
  if (!chosen) {
    // Unexplained: the convention under which the most cases agree with the reference.
    int best = -1;
    for (std::optional<Convention> c : conventions) {
      if (!usable(c)) continue;
      int ok = 0, masked_ok = 0;
      for (Prepared& p : cases)
        if (p.skipped.empty() && compare_run(p, *run_for(p, c), forced).ok()) {
          ++ok;
          masked_ok += p.masked;
        }
      if (ok > best) {
        best = ok;
        chosen = masked_ok > 0 ? c : std::nullopt;
      }
    }
    if (!chosen) {  // no convention runs every case: report the first error under keep
      for (Prepared& p : cases)
        for (const auto& [conv, run] : p.runs)
          if (run.error) {
            r.verdict = Verdict::error;
            r.error = *run.error;
            python_error_line(r, *run.error);
            return r;
          }
      chosen = std::optional<Convention>{};
    }
  }
  r.convention = *chosen;
  r.verdict = !explained ? Verdict::unknown : found.empty() ? Verdict::correct : Verdict::mistakes;
  r.mistakes = found.list();

  for (Prepared& p : cases) {
    CaseReport cr;
    cr.name = p.name;
    cr.what = p.what;
    cr.skipped = p.skipped;
    const StudentRun* run = p.skipped.empty() ? run_for(p, r.convention) : nullptr;
    if (run && run->output && !run->error) {
      cr.ran = true;
      cr.mask_form = run->mask_form;
      cr.reference = std::make_shared<const ForwardResult<float>>(p.ref);
      cr.yours = *run;
      const RunDiff d = compare_run(p, *run, forced);
      cr.ok = d.ok();
      cr.max_abs_diff = d.output.max_abs;
      if (d.weights_compared) cr.weights_max_abs_diff = d.weights.max_abs;
      if (cr.ok) cr.note = fully_masked_note(p, *run);
      if (run->weights && !d.weights_compared)
        cr.note += std::string(cr.note.empty() ? "" : "; ") + "the returned weights " +
                   shape_str(run->weights->shape) + " are neither (N, H, L, S) nor (N, L, S): not compared";
      if (r.verdict == Verdict::unknown && !cr.ok && r.unknown_detail.empty()) {
        r.unknown_detail = "first differs in case " + p.name + " (" + p.what + ")";
        if (d.weights_compared)
          r.unknown_detail +=
              d.weights.ok ? "; its attention weights equal the reference's, so the difference starts after "
                             "the softmax (weights @ v, the head merge or the output projection)"
                           : "; its attention weights differ too, so the difference starts at or before the "
                             "softmax (the projections, the scores, the scale or the mask)";
      }
    } else if (run && run->error) {
      cr.skipped =
          "raised with the mask as " + std::string(r.convention ? to_string(*r.convention) : "given");
    } else if (cr.skipped.empty()) {
      cr.skipped = "no mask convention under which every case runs";
    }
    r.cases.push_back(cr);
  }
  return r;
}

// (N·L) rows of a forward whose every head sees at least one key.
std::vector<char> rows_with_keys(const ForwardResult<float>& f) {
  const Dims& d = f.dims;
  std::vector<char> ok(std::size_t(d.N * d.L), 1);
  const Stage<float>* m = f.trace.find("attn_mask");
  if (!m) return ok;
  const Tensor<float> mask = m->contiguous();  // (N, H, L, S')
  for (std::int64_t n = 0; n < d.N; ++n)
    for (std::int64_t h = 0; h < d.H; ++h)
      for (std::int64_t i = 0; i < d.L; ++i) {
        bool any = false;
        for (std::int64_t j = 0; j < d.S_total && !any; ++j)
          any = !is_blocked(mask.data[std::size_t(((n * d.H + h) * d.L + i) * d.S_total + j)]);
        if (!any) ok[std::size_t(n * d.L + i)] = 0;
      }
  return ok;
}

// The engine's forward of a case with the student's weights; one input (self-attention) when the
// student's forward takes x alone.
ForwardResult<float> reference(const CheckCase& c, const Weights<float>& w, bool one_input) {
  Config cfg;
  cfg.embed_dim = c.d_model;
  cfg.num_heads = c.num_heads;
  cfg.bias = !w.in_proj_bias.empty();
  Inputs<float> in;
  in.query = c.query;
  in.key = one_input ? c.query : c.key;
  in.value = one_input ? c.query : c.value;
  Options o;
  o.backend = Backend::reference;
  if (!c.blocked.empty()) {
    Mask<float> m;
    m.dtype = MaskDType::boolean;
    m.values = c.blocked;
    in.attn_mask = m;
    if (c.blocked.dim() == 3) o.attn_mask_layout = MaskLayout::per_batch;
  }
  return forward(cfg, w, in, o);
}

}  // namespace

CheckReport diagnose(const std::vector<CheckCase>& cases, const StudentRuns& runs) {
  std::vector<Prepared> prepared;
  MistakeSet forced;
  for (const CheckCase& c : cases) {
    Prepared p;
    p.name = c.name;
    p.what = c.what;
    p.masked = !c.blocked.empty();
    const auto w = runs.weights.find({c.d_model, c.num_heads});
    if (w == runs.weights.end())
      throw ConfigError("weights", "no weights read for d_model=" + std::to_string(c.d_model));
    p.weights = w->second;
    if (p.weights.out_proj_weight.empty()) {
      // No output projection among the parameters: the reference gets the identity (so the trace
      // has q, k, v and the mask), and every variant returns the concatenated heads.
      forced = {Mistake::no_output_projection};
      p.weights.out_proj_weight = Tensor<float>({c.d_model, c.d_model});
      for (std::int64_t e = 0; e < c.d_model; ++e)
        p.weights.out_proj_weight.data[std::size_t(e * c.d_model + e)] = 1.f;
      if (!p.weights.in_proj_bias.empty()) p.weights.out_proj_bias = Tensor<float>({c.d_model});
    }
    const auto r = runs.runs.find(c.name);
    if (c.cross && runs.call_style != "qkv")
      p.skipped = "forward takes one input (self-attention): no cross-attention";
    else if (p.masked && !runs.takes_mask)
      p.skipped = "forward takes no mask";
    else if (r == runs.runs.end())
      p.skipped = "not run";
    else
      p.runs = r->second;
    p.set_reference(reference(c, p.weights, runs.call_style != "qkv"));
    p.row_ok = rows_with_keys(p.ref);
    // An output of the wrong shape is a failed comparison, not a crash.
    for (auto& [conv, run] : p.runs)
      if (run.output && run.output->numel() != std::int64_t(p.ref.trace["output"].contiguous().data.size())) {
        PythonError e;
        e.stage = "output";
        e.type = "ShapeError";
        e.message = "forward returned " + shape_str(run.output->shape) + ", expected " +
                    shape_str(p.ref.trace["output"].shape) + " (batch-first)";
        e.case_name = c.name;
        e.convention = conv;
        run.output.reset();
        run.error = e;
      }
    prepared.push_back(std::move(p));
  }
  return diagnose_prepared(prepared, forced, runs);
}

// ---- the child Python ----

namespace {

// A temporary folder, removed with everything in it when this goes.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "mha-check-XXXXXX").string();
    if (!::mkdtemp(pattern.data()))
      throw FileError("check", "cannot make a temporary folder in " + fs::temp_directory_path().string());
    path = pattern;
  }
  ~TempDir() {
    // MHA_CHECK_KEEP=1 leaves it for a look at what the child was given and wrote.
    if (const char* keep = std::getenv("MHA_CHECK_KEEP"); keep && std::string(keep) == "1") {
      std::fprintf(stderr, "mha check: kept %s\n", path.c_str());
      return;
    }
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

PythonError python_error(const json& j) {
  PythonError e;
  e.stage = j.value("stage", "");
  e.type = j.value("type", "");
  e.message = j.value("message", "");
  e.file = j.value("file", "");
  e.line = j.value("line", 0);
  e.case_name = j.value("case", "");
  e.convention = j.value("convention", "");
  e.traceback = j.value("traceback", "");
  return e;
}

std::string default_python() {
  if (const char* p = std::getenv("MHA_PYTHON"); p && *p) return p;
  return "/usr/bin/python3";
}

}  // namespace

CheckReport check_python_file(const std::string& student_py, const PythonCheckOptions& options) {
  const std::string python = options.python.empty() ? default_python() : options.python;
  const std::string without =
      "; without Python, check tensors computed elsewhere: mha check --scenario S.json --output OUT.npy";
  if (platform::find_program(python).empty())
    throw CheckRunError("no_python", "no Python at " + python +
                                         " (install python3 and python3-torch, or set MHA_PYTHON)" + without);
  std::string runner = options.runner;
  if (runner.empty()) {
    const std::string assets = platform::assets_dir();
    runner = assets.empty() ? "" : assets + "/check/check_runner.py";
  }
  if (runner.empty() || !fs::is_regular_file(runner))
    throw CheckRunError("no_runner", "the checker's helper script is missing (" +
                                         (runner.empty() ? std::string("no data folder found") : runner) +
                                         ")");
  std::error_code ec;
  const fs::path student = fs::absolute(student_py, ec);
  if (!fs::is_regular_file(student)) throw FileError(student_py, student_py + ": no such file");

  const std::vector<CheckCase> cases = check_cases();
  TempDir tmp;
  json manifest = {{"student", student.string()}, {"class", options.class_name}, {"map", options.map}};
  json configs = json::array(), jcases = json::array();
  std::vector<std::pair<std::int64_t, std::int64_t>> config_list;
  for (const CheckCase& c : cases) {
    const std::pair<std::int64_t, std::int64_t> cfg{c.d_model, c.num_heads};
    auto at = std::find(config_list.begin(), config_list.end(), cfg);
    if (at == config_list.end()) {
      config_list.push_back(cfg);
      configs.push_back({{"d_model", c.d_model}, {"num_heads", c.num_heads}});
      at = config_list.end() - 1;
    }
    const auto save = [&](const std::string& name, const Array& a) {
      write_npy((tmp.path / name).string(), a);
      return name;
    };
    json jc = {{"name", c.name},
               {"config", at - config_list.begin()},
               {"cross", c.cross},
               {"query", save(c.name + "_query.npy", to_array(c.query))},
               {"key", save(c.name + "_key.npy", to_array(c.key))},
               {"value", save(c.name + "_value.npy", to_array(c.value))}};
    if (!c.blocked.empty()) {
      Tensor<float> keep = c.blocked, additive = c.blocked;
      for (float& v : keep.data) v = v != 0 ? 0.f : 1.f;
      for (float& v : additive.data) v = v != 0 ? kMaskBlocked : 0.f;
      jc["mask"] = {{"keep", save(c.name + "_keep.npy", to_array(keep))},
                    {"block", save(c.name + "_block.npy", to_bool_array(c.blocked))},
                    {"additive", save(c.name + "_additive.npy", to_array(additive))}};
    }
    jcases.push_back(jc);
  }
  manifest["configs"] = configs;
  manifest["cases"] = jcases;
  {
    std::ofstream f(tmp.path / "cases.json");
    f << manifest.dump(1);
  }

  platform::ProcessOptions po;
  po.timeout_s = options.timeout_s;
  po.working_dir = tmp.path.string();
  po.running_pid = options.running_pid;
  // Teaching sizes: one thread starts faster than a pool; no .pyc written next to the student's file.
  po.env = {"OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1"};
  const platform::ProcessResult pr = platform::run_process({python, runner, tmp.path.string()}, po);
  if (!pr.started) throw CheckRunError("no_python", pr.error + without);
  if (pr.timed_out) {
    std::string at = read_text(tmp.path / "progress.txt");
    throw CheckRunError("timeout", "stopped after " + std::to_string(int(options.timeout_s)) +
                                       " s: the student's file did not finish" +
                                       (at.empty() ? "" : " (it was at: " + at + ")"));
  }
  if (pr.exit_code == 3)
    throw CheckRunError("no_torch", python + " cannot import torch (" + pr.out.substr(0, pr.out.find('\n')) +
                                        "): install it (Debian/Ubuntu: apt install python3-torch)" + without);
  if (pr.exit_code != 0 || !fs::is_regular_file(tmp.path / "result.json"))
    throw CheckRunError("runner", "the checker's helper failed (exit " + std::to_string(pr.exit_code) +
                                      (pr.signalled ? ", killed by a signal" : "") + "): " + pr.out);

  const json res = json::parse(read_text(tmp.path / "result.json"));
  StudentRuns s;
  s.class_name = res.value("class", "");
  s.constructor = res.value("constructor", "");
  s.signature = res.value("signature", "");
  s.call_style = res.value("call_style", "");
  s.takes_mask = res.value("takes_mask", false);
  for (const auto& p : res.value("parameters", json::array())) s.parameters.push_back(p.get<std::string>());
  const json mapping = res.value("mapping", json::object());  // kept: items() refers to it
  for (const auto& [role, name] : mapping.items()) s.mapping[role] = name.get<std::string>();
  for (const auto& n : res.value("notes", json::array())) s.notes.push_back(n.get<std::string>());
  if (res.contains("error") && !res["error"].is_null()) {
    CheckReport r;
    r.student = s;
    r.error = python_error(res["error"]);
    python_error_line(r, *r.error);
    if (r.error->stage == "weights") {
      std::string list;
      for (const std::string& p : s.parameters) list += (list.empty() ? "" : ", ") + p;
      const std::string hint = res.value("map_hint", "");
      r.error_message +=
          "; its parameters: " + (list.empty() ? std::string("none") : list) +
          "; name the projections with --map " +
          (hint.empty() ? "NAME=q,NAME=k,NAME=v,NAME=o (or NAME=qkv for one fused [3E, E] layer)"
                        : hint +
                              " (the layers in the order they are defined; change it if "
                              "that is not their order)");
    }
    return r;
  }
  for (const auto& c : res.value("configs", json::array())) {
    const fs::path dir = tmp.path / c.at("weights").get<std::string>();
    s.weights[{c.at("d_model").get<std::int64_t>(), c.at("num_heads").get<std::int64_t>()}] =
        read_state_dict<float>(dir.string(), "");
  }
  for (const auto& j : res.value("runs", json::array())) {
    StudentRun run;
    run.mask_form = j.value("mask_form", "");
    if (!j["error"].is_null()) run.error = python_error(j["error"]);
    if (!j["output"].is_null())
      run.output = to_tensor<float>(read_npy((tmp.path / j["output"].get<std::string>()).string()));
    if (!j["weights"].is_null())
      run.weights = to_tensor<float>(read_npy((tmp.path / j["weights"].get<std::string>()).string()));
    s.runs[j.at("case").get<std::string>()][j.at("convention").get<std::string>()] = std::move(run);
  }
  return diagnose(cases, s);
}

// ---- without Python ----

CheckReport check_tensors(const Scenario& s, const Tensor<float>& output,
                          const std::optional<Tensor<float>>& weights) {
  Built b = build_forward(s);
  b.options.backend = Backend::reference;
  Prepared p;
  p.name = "scenario";
  p.what = "\"" + s.name + "\" as given";
  p.set_reference(forward(b.config, b.weights, b.inputs, b.options));
  p.weights = b.weights;
  p.row_ok = rows_with_keys(p.ref);
  const Dims& d = p.ref.dims;
  if (output.numel() != d.N * d.L * d.E)
    throw ShapeError("--output", "--output holds " + shape_str(output.shape) + ", expected (" +
                                     std::to_string(d.N) + ", " + std::to_string(d.L) + ", " +
                                     std::to_string(d.E) + ") for the scenario");
  StudentRun run;
  run.output = output;
  run.weights = weights;
  if (weights && weights->shape != Shape{d.N, d.H, d.L, d.S_total} &&
      weights->shape != Shape{d.N, d.L, d.S_total})
    throw ShapeError("--attn-weights",
                     "--attn-weights holds " + shape_str(weights->shape) + ", expected (N, H, L, S) = " +
                         shape_str({d.N, d.H, d.L, d.S_total}) + " or head-averaged (N, L, S)");
  p.runs[""] = run;
  std::vector<Prepared> cases;
  cases.push_back(std::move(p));
  StudentRuns none;
  return diagnose_prepared(cases, {}, none);
}

// ---- JSON ----

std::string report_json(const CheckReport& r) {
  using json = nlohmann::ordered_json;  // the keys in the order the schema lists them
  const auto number = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j;
  j["verdict"] = r.verdict == Verdict::error ? json(nullptr) : json(to_string(r.verdict));
  json ids = json::array();
  for (Mistake m : r.mistakes) ids.push_back(mistake_info(m).id);
  j["mistakes"] = ids;
  j["mask_convention"] = r.convention ? json(to_string(*r.convention)) : json(nullptr);
  json cases = json::array();
  for (const CaseReport& c : r.cases) {
    json jc = {{"name", c.name},
               {"ok", c.ran ? json(c.ok) : json(nullptr)},
               {"max_abs_diff", c.ran ? number(c.max_abs_diff) : json(nullptr)}};
    if (c.weights_max_abs_diff >= 0) jc["weights_max_abs_diff"] = number(c.weights_max_abs_diff);
    if (!c.skipped.empty()) jc["skipped"] = c.skipped;
    if (!c.note.empty()) jc["note"] = c.note;
    cases.push_back(jc);
  }
  j["cases"] = cases;
  j["tolerance"] = {{"atol", r.atol}, {"rtol", r.rtol}};
  if (!r.unknown_detail.empty()) j["unknown"] = r.unknown_detail;
  if (!r.student.class_name.empty()) {
    j["class"] = r.student.class_name;
    j["constructor"] = r.student.constructor;
    j["signature"] = r.student.signature;
    j["mapping"] = r.student.mapping;
  }
  if (r.verdict == Verdict::error) {
    json e = {{"message", r.error_message}};
    if (r.error)
      e.update({{"stage", r.error->stage},
                {"type", r.error->type},
                {"file", r.error->file},
                {"line", r.error->line},
                {"case", r.error->case_name}});
    j["error"] = e;
  }
  if (!r.notes.empty()) j["notes"] = r.notes;
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

}  // namespace mha::studio
