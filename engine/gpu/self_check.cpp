// The GPU self-check (GpuBackend::self_check in gpu_backend.hpp): known-answer problems run on the
// GPU and on the reference path, compared stage by stage, before a driver's numbers are used. One
// verdict per driver and launch sizes, for the whole process.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "errors.hpp"
#include "gpu/gl_util.hpp"
#include "gpu/gpu_backend.hpp"
#include "gpu/shader.hpp"
#include "masks.hpp"
#include "torch_rng.hpp"

namespace mha::gpu {

namespace {

// tests/test_gpu.cpp's tolerance: |got − want| <= atol + rtol·|want|, NaN and ±inf in the same places.
constexpr double kAtol = 1e-6, kRtol = 1e-6;

std::mutex& verdicts_mutex() {
  static std::mutex m;
  return m;
}
// Driver key -> "" (trusted) or the reason it was refused.
std::map<std::string, std::string>& verdicts() {
  static std::map<std::string, std::string> v;
  return v;
}

std::string index_str(const Shape& shape, std::size_t flat) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = std::int64_t(flat) % shape[d];
    flat /= std::size_t(shape[d]);
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "] of " + shape_str(shape);
}

SelfCheckReport::Stage compare(const std::string& name, const Tensor<float>& got, const Tensor<float>& want) {
  SelfCheckReport::Stage st;
  st.name = name;
  if (got.shape != want.shape) {
    st.max_abs_diff = std::numeric_limits<double>::infinity();
    st.first_mismatch = "shape " + shape_str(got.shape) + ", expected " + shape_str(want.shape);
    return st;
  }
  for (std::size_t i = 0; i < got.data.size(); ++i) {
    const double a = got.data[i], e = want.data[i];
    bool ok;
    double diff = 0;
    if (std::isnan(a) || std::isnan(e) || std::isinf(a) || std::isinf(e)) {
      ok = (std::isnan(a) && std::isnan(e)) || a == e;
      diff = ok ? 0 : std::numeric_limits<double>::infinity();
    } else {
      diff = std::abs(a - e);
      ok = diff <= kAtol + kRtol * std::abs(e);
    }
    st.max_abs_diff = std::max(st.max_abs_diff, diff);
    if (!ok && st.first_mismatch.empty()) {
      std::ostringstream os;
      os.precision(10);
      os << "index " << i << " = " << index_str(got.shape, i) << ": got " << a << ", expected " << e
         << " (|diff| " << diff << ", allowed " << kAtol + kRtol * std::abs(e) << ")";
      st.first_mismatch = os.str();
    }
  }
  return st;
}

SelfCheckReport::Stage compare_count(const std::string& name, std::int64_t got, std::int64_t want) {
  SelfCheckReport::Stage st;
  st.name = name;
  st.max_abs_diff = double(std::abs(got - want));
  if (got != want) st.first_mismatch = "got " + std::to_string(got) + ", expected " + std::to_string(want);
  return st;
}

// Every stage the GPU computes (the trace's other stages are the inputs, or views of these), and
// the fully masked row count.
void compare_forwards(SelfCheckReport::Case& out, const ForwardResult<float>& gpu,
                      const ForwardResult<float>& ref) {
  for (const char* name : {"q", "k", "v", "scores", "scores_scaled", "scores_masked", "attn_weights",
                           "context", "concat", "output", "attn_weights_avg"})
    out.stages.push_back(compare(name, gpu.trace[name].contiguous(), ref.trace[name].contiguous()));
  out.stages.push_back(compare_count("fully_masked_rows", gpu.fully_masked_rows, ref.fully_masked_rows));
}

ForwardResult<float> run_forward(const Config& c, const SeededCase<float>& sc, Options o, Backend b,
                                 DeviceForward* device) {
  o.backend = b;
  o.device = device;
  ForwardResult<float> r = forward(c, sc.weights, sc.inputs, o);
  if (b == Backend::gpu && r.backend != Backend::gpu)  // the engine fell back: the check cannot run
    throw DeviceError("gpu", r.fallback_reason);
  return r;
}

// Non-zero biases, so that the bias paths are checked too (torch's init zeroes in_proj_bias).
void random_biases(const Config& c, SeededCase<float>& sc, std::uint64_t seed) {
  TorchGenerator gen(seed);
  const std::int64_t E = c.embed_dim, kv = c.kv_embed_dim();
  sc.weights.in_proj_bias = gen.rand<float>({E + 2 * kv});
  sc.weights.out_proj_bias = gen.rand<float>({E});
}

}  // namespace

std::string GpuBackend::driver_key() const {
  const char* perturbed = std::getenv("MHA_GPU_PERTURB");
  return gl_vendor_ + " | " + gl_renderer_ + " | " + gl_version_ + " | TILE=" + std::to_string(sizes_.tile) +
         " LOCAL_SIZE=" + std::to_string(sizes_.local_size) +
         " MM_TILE=" + std::to_string(sizes_.product_tile) +
         " MM_WORK=" + std::to_string(sizes_.product_work) +
         " MM_DEPTH=" + std::to_string(sizes_.product_depth) +
         (perturbed ? std::string(" | perturbed ") + perturbed : "");
}

void GpuBackend::ensure_trusted() {
  if (checking_ || trusted_) return;
  {
    Release release{release_};
    bind();  // no context or a shader that does not build: the caller's DeviceError, no verdict
  }
  std::lock_guard<std::mutex> lock(verdicts_mutex());
  auto it = verdicts().find(driver_key());
  if (it == verdicts().end()) {
    const SelfCheckReport r = run_self_check();
    if (!r.completed) throw DeviceError("gpu", r.reason);
    it = verdicts().emplace(driver_key(), r.trusted ? "" : r.reason).first;
  }
  if (!it->second.empty()) throw DeviceError("gpu", it->second);
  trusted_ = true;
}

SelfCheckReport GpuBackend::self_check() {
  std::lock_guard<std::mutex> lock(verdicts_mutex());
  SelfCheckReport r = run_self_check();
  if (r.completed) verdicts()[driver_key()] = r.trusted ? "" : r.reason;
  trusted_ = r.completed && r.trusted;
  return r;
}

SelfCheckReport GpuBackend::run_self_check() {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  SelfCheckReport report;
  report.sizes = sizes_;
  report.context = context_description_;
  struct Checking {  // this backend's own forwards skip ensure_trusted while the check runs
    bool& flag;
    explicit Checking(bool& f) : flag(f) { flag = true; }
    ~Checking() { flag = false; }
  } checking{checking_};
  try {
    {
      Release release{release_};
      bind();
    }
    report.vendor = gl_vendor_;
    report.renderer = gl_renderer_;
    report.version = gl_version_;
    // The largest tile side: L crosses the linear tiles and the product tiles alike.
    const std::int64_t tile = std::max(sizes_.tile, sizes_.product_tile), local = sizes_.local_size;
    const float inf = std::numeric_limits<float>::infinity();

    // 1. Every tile edge: L, d_k and E past TILE and ragged, S past LOCAL_SIZE (the softmax's
    //    work-group reduces more keys than it has invocations), two batch items, cross-attention
    //    with kdim = vdim = E, a float attn_mask with blocked cells, a key_padding_mask, and query
    //    row 3 blocked everywhere (torch's NaN policy).
    Config c1;
    c1.num_heads = 2;
    c1.embed_dim = 2 * (tile + 4);
    const std::int64_t L1 = 2 * tile + 5, S1 = local + 7;
    SeededCase<float> sc1 = torch_seeded_case<float>(c1, 5, 2, L1, S1);
    random_biases(c1, sc1, 7);
    Mask<float> attn;
    attn.dtype = MaskDType::floating;
    attn.values = Tensor<float>({L1, S1});
    for (std::size_t at = 0; at < attn.values.data.size(); ++at)
      attn.values.data[at] = at % 7 == 0 ? -inf : float(at % 5) * 0.1f;
    for (std::int64_t j = 0; j < S1; ++j) attn.values.data[std::size_t(3 * S1 + j)] = -inf;
    sc1.inputs.attn_mask = attn;
    sc1.inputs.key_padding_mask = key_padding_from_lengths<float>({S1, S1 - local / 4 - 1}, S1);
    Options o1;
    o1.fully_masked = FullyMasked::nan;
    {
      SelfCheckReport::Case k;
      k.name = "tiles";
      k.what = "N=2, L=" + std::to_string(L1) + ", S=" + std::to_string(S1) +
               ", E=" + std::to_string(c1.embed_dim) +
               ", H=2: float attn_mask + key_padding_mask, a fully masked row (NaN policy)";
      compare_forwards(k, run_forward(c1, sc1, o1, Backend::gpu, this),
                       run_forward(c1, sc1, o1, Backend::reference, nullptr));
      report.cases.push_back(std::move(k));
    }

    // 2. GQA (4 query heads on 2 key/value heads), add_bias_kv and add_zero_attn (S' = S + 2), a
    //    bool causal mask, the zero policy, E past TILE.
    Config c2;
    c2.num_heads = 4;
    c2.num_kv_heads = 2;
    c2.embed_dim = 4 * (tile / 2 + 3);
    c2.add_zero_attn = true;
    const std::int64_t L2 = tile + 9;
    SeededCase<float> sc2 = torch_seeded_case<float>(c2, 31, 2, L2, L2);
    random_biases(c2, sc2, 11);
    c2.add_bias_kv = true;  // torch draws bias_k from a normal, which the generator does not: uniform here
    TorchGenerator gen(13);
    sc2.weights.bias_k = gen.rand<float>({1, 1, c2.kv_embed_dim()});
    sc2.weights.bias_v = gen.rand<float>({1, 1, c2.kv_embed_dim()});
    sc2.inputs.attn_mask = causal_mask<float>(L2, L2);
    Options o2;
    o2.fully_masked = FullyMasked::zero;
    {
      SelfCheckReport::Case k;
      k.name = "gqa_bias_kv";
      k.what = "N=2, L=S=" + std::to_string(L2) + ", E=" + std::to_string(c2.embed_dim) +
               ", H=4 on 2 key/value heads, add_bias_kv, add_zero_attn, bool causal mask (zero policy)";
      compare_forwards(k, run_forward(c2, sc2, o2, Backend::gpu, this),
                       run_forward(c2, sc2, o2, Backend::reference, nullptr));
      report.cases.push_back(std::move(k));
    }

    // 3. Large L's row statistics (a second reduction over keys, S past LOCAL_SIZE) and tiles
    //    recomputed from them, on case 1's problem under the zero policy: a ragged corner tile and
    //    the whole of one head, which holds the fully masked row.
    {
      Options oz = o1;
      oz.fully_masked = FullyMasked::zero;
      const ForwardResult<float> ref = run_forward(c1, sc1, oz, Backend::reference, nullptr);
      const Stage<float>& masked = ref.trace["scores_masked"];  // (N, H, L, S')
      const Stage<float>& weights = ref.trace["attn_weights"];
      const RowStats stats = prepare_rows(c1, sc1.weights, sc1.inputs, oz);
      const std::int64_t N = 2, H = 2, Sp = S1;
      Tensor<float> want_max({N, H, L1}), want_lse({N, H, L1});
      for (std::int64_t r = 0; r < N * H * L1; ++r) {
        const std::int64_t n = r / (H * L1), h = r / L1 % H, i = r % L1;
        double m = -std::numeric_limits<double>::infinity(), sum = 0;
        for (std::int64_t j = 0; j < Sp; ++j) m = std::max(m, double(masked.at({n, h, i, j})));
        for (std::int64_t j = 0; j < Sp; ++j) sum += std::exp(double(masked.at({n, h, i, j})) - m);
        want_max.data[std::size_t(r)] = float(m);
        want_lse.data[std::size_t(r)] = std::isinf(m) ? float(m) : float(m + std::log(sum));
      }
      SelfCheckReport::Case k;
      k.name = "row_stats";
      k.what = "case tiles' problem through prepare_rows and weights_tile (zero policy)";
      k.stages.push_back(compare("row_max", stats.row_max, want_max));
      k.stages.push_back(compare("row_lse", stats.row_lse, want_lse));
      auto tile_of = [&](const char* name, std::int64_t n, std::int64_t h, std::int64_t i0, std::int64_t rows,
                         std::int64_t j0, std::int64_t cols) {
        Tensor<float> want({rows, cols});
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t j = 0; j < cols; ++j)
            want.data[std::size_t(i * cols + j)] = weights.at({n, h, i0 + i, j0 + j});
        return compare(name, weights_tile(n, h, i0, rows, j0, cols), want);
      };
      const std::int64_t rows = std::min<std::int64_t>(7, L1), cols = std::min<std::int64_t>(13, Sp);
      k.stages.push_back(tile_of("weights_tile[corner]", 1, 1, L1 - rows, rows, Sp - cols, cols));
      k.stages.push_back(tile_of("weights_tile[head 0]", 0, 0, 0, L1, 0, Sp));
      rows_ready_ = false;  // the caller's prepare_rows, not the check's, is what tiles may use
      report.cases.push_back(std::move(k));
    }

    report.completed = true;
    report.trusted = true;
    for (const SelfCheckReport::Case& k : report.cases)
      for (const SelfCheckReport::Stage& st : k.stages)
        if (report.trusted && !st.first_mismatch.empty()) {
          report.trusted = false;
          report.reason = "GPU self-check failed on " + gl_renderer_ + " (OpenGL " + gl_version_ +
                          "): case " + k.name + ", stage " + st.name + ", " + st.first_mismatch +
                          "; the GPU path is not used on this driver";
        }
  } catch (const std::exception& e) {  // DeviceError, or the engine refusing a case on this device
    report.completed = false;
    report.trusted = false;
    report.reason = std::string("the GPU self-check could not run: ") + e.what();
    rows_ready_ = false;
  }
  stages_ready_ = false;  // the check's forwards are not the caller's (read_stage)
  report.milliseconds = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return report;
}

}  // namespace mha::gpu
