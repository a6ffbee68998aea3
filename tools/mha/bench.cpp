// `mha bench`: times the full-trace forward at named sizes, small to xl (median and spread over
// repeated recomputes into one workspace, GFLOP/s, per-stage breakdown, peak RSS), and, with
// --sgemm N, Eigen's float GEMM rate on the same build as the yardstick for what the engine reaches.
#include <sys/resource.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "cost.hpp"
#include "cpu_dispatch.hpp"
#include "data_dir.hpp"
#include "errors.hpp"
#include "io/hf_checkpoint.hpp"
#include "limits.hpp"
#include "masks.hpp"
#include "mha.hpp"
#include "model/language_model.hpp"
#include "problem.hpp"
#include "progress.hpp"
#include "stage_export.hpp"
#include "torch_rng.hpp"

namespace mha::cli {

namespace {

struct BenchSize {
  const char* name;
  std::int64_t N, L, E, H;
  int repeats;            // default for the cpu backend: enough for a stable median in a few seconds
  int reference_repeats;  // the reference path is explicit loops: seconds per run at medium
};

// The named sizes (self-attention shapes, S = L, distinct query/key/value tensors).
const BenchSize kSizes[] = {
    {"small", 3, 4, 8, 2, 2000, 200},  {"teaching", 1, 16, 64, 4, 1000, 50},
    {"medium", 1, 512, 512, 8, 30, 2}, {"large", 1, 2048, 512, 8, 10, 0},
    {"xl", 1, 4096, 1024, 16, 3, 0},
};
// The reference path runs medium in seconds; large would take minutes per run.
constexpr const char* kLargestReference = "medium";

struct BenchArgs {
  std::string size = "all", backend = "cpu";
  int repeats = 0, threads = 0, sgemm = 0;
  bool json = false, fresh = false, export_grid = false, quiet = false;
  std::string model_dir;      // --model: a model folder, timed at --tokens
  std::string stages;         // --stages: comma-separated trace names to read back (Options::stages)
  int head_weights = -1;      // --head-weights H: also compute head H's attn_weights on demand (stage_rows)
  std::int64_t overview = 0;  // --weights-overview B: Options::weights_overview
  std::int64_t tokens = 256;
  std::string edit;  // --edit mask|token: time the recompute after one edit instead
};

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Value at fraction q of sorted samples, interpolating linearly between neighbours.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const std::size_t lo = std::size_t(pos), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

// The process's peak resident set. Linux's VmHWM first: getrusage's ru_maxrss also counts the
// peak of the process image before exec, so under a parent as big as a torch interpreter it would
// report the parent's size. Elsewhere ru_maxrss.
std::uint64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "VmHWM:  1234 kB"
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return std::uint64_t(u.ru_maxrss) * 1024;  // Linux and BSD report KiB
}

// The process's resident set now (VmRSS; 0 where /proc is not there).
std::uint64_t current_rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// CPU time the process has used, every thread, user + system (ms): what work cost when the machine
// is shared and wall time says more about the other processes than about this one.
double cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
          double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3);
}

std::vector<std::string> stage_list(const std::string& csv) {  // --stages
  std::vector<std::string> out;
  for (std::size_t at = 0; at < csv.size();) {
    const std::size_t comma = std::min(csv.find(',', at), csv.size());
    if (comma > at) out.push_back(csv.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// --edit: what one edit costs the engine at this size, on a causal mask, as the app's worker
// computes it: three workspaces in turn, the result on screen and the one before it held. mask: one
// mask cell toggled below the diagonal. The result three edits old, which nothing holds any more,
// is patched in place (forward_mask_edit_in_place: the edited query row recomputed, every head,
// and the rows of the two edits before copied from the newest result); where that does not apply,
// forward_mask_edit recomputes the changed row from the newest result and copies the rest. token:
// one value of one token's input changed, which moves its q, k and v row and so every softmax row:
// a forward from the newest result's q, k and v with that token's rows projected again
// (forward_inputs_edit). head: one value of W_q in head 0's rows, as a drag on one weight does: the result
// three edits old is edited in place (forward_weights_edit_in_place: the in-projections, head 0's
// attention, the head average and the output). The new mask, input or weights are made outside the
// timed part.
nlohmann::json bench_edit(const BenchSize& s, const BenchArgs& a) {
  if (a.backend != "cpu") throw ConfigError("--edit", "--edit times the cpu backend only");
  Config c;
  c.embed_dim = s.E;
  c.num_heads = s.H;
  SeededCase<float> sc = torch_seeded_case<float>(c, 0, s.N, s.L, s.L);
  sc.inputs.attn_mask = causal_mask<float>(s.L, s.L);
  Options o;
  o.threads = a.threads;
  o.stages = stage_list(a.stages);
  o.weights_overview = a.overview;
  Workspace<float> ws[3];
  ForwardResult<float> r[3];
  Weights<float> weights_of[3];  // the weights each result was computed with
  forward(c, sc.weights, sc.inputs, o, ws[0], r[0]);
  weights_of[0] = sc.weights;
  const int repeats = a.repeats > 0 ? a.repeats : std::max(10, s.repeats);
  platform::ProgressLine progress(std::string("mha bench --edit ") + a.edit + " " + s.name, a.quiet);
  std::vector<double> ms;
  int rows_only = 0, in_place = 0;
  // k = 0, 1: warm-up (fault in the other workspaces); the first timed edit finds three results.
  for (int k = 0; k <= repeats + 1; ++k) {
    progress.step(k, repeats + 2);
    const int newest = k % 3, to = (k + 1) % 3;
    Inputs<float> in = sc.inputs;
    if (a.edit == "mask") {  // toggle cell (i, j), j < i, of the (L, S) bool mask
      const std::int64_t i = 1 + (std::int64_t(k) * 7919) % (s.L - 1), j = (std::int64_t(k) * 104729) % i;
      float& cell = sc.inputs.attn_mask->values.data[std::size_t(i * s.L + j)];
      cell = cell != 0 ? 0.0f : 1.0f;
      in.attn_mask = sc.inputs.attn_mask;
    } else if (a.edit == "head") {  // one value of W_q in head 0's rows (0 .. d_k - 1)
      const std::int64_t dk = s.E / s.H, row = std::int64_t(k) % dk, col = (std::int64_t(k) * 31) % s.E;
      sc.weights.in_proj_weight.data[std::size_t(row * s.E + col)] += 0.01f;
    } else {  // one value of one token's embedding
      const std::size_t at = std::size_t((std::int64_t(k) * 7919) % sc.inputs.query.numel());
      sc.inputs.query.data[at] += 0.05f;
      in.query = sc.inputs.query, in.key = in.query, in.value = in.query;
    }
    const bool fresh = k < 2;  // r[to] not computed yet
    const Clock::time_point t0 = Clock::now();
    bool rows = false, patched = false;
    if (a.edit == "mask") {
      patched = !fresh && forward_mask_edit_in_place(c, sc.weights, in, o, ws[to], r[to], &r[newest]);
      rows = patched || forward_mask_edit(c, sc.weights, in, o, r[newest], ws[to], r[to]);
    } else if (a.edit == "head") {
      patched = rows =
          !fresh && forward_weights_edit_in_place(c, sc.weights, weights_of[to], in, o, ws[to], r[to]);
      if (!patched) forward(c, sc.weights, in, o, ws[to], r[to]);
    } else {
      rows = forward_inputs_edit(c, sc.weights, sc.weights, in, o, r[newest], ws[to], r[to]);
    }
    const double t = ms_between(t0, Clock::now());
    weights_of[to] = sc.weights;
    if (k < 2) continue;
    ms.push_back(t);
    rows_only += rows;
    in_place += patched;
  }
  return {{"size", s.name},
          {"edit", a.edit},
          {"n", s.N},
          {"L", s.L},
          {"E", s.E},
          {"H", s.H},
          {"stages", a.stages.empty() ? "all" : a.stages},
          {"weights_overview", a.overview},
          {"cpu_kernels", cpu_kernels()},
          {"repeats", repeats},
          {"rows_only", rows_only},
          {"in_place", in_place},
          {"median_ms", quantile(ms, 0.5)},
          {"p10_ms", quantile(ms, 0.1)},
          {"p90_ms", quantile(ms, 0.9)},
          {"min_ms", quantile(ms, 0)},
          {"max_ms", quantile(ms, 1)},
          {"peak_rss_bytes", peak_rss_bytes()}};
}

nlohmann::json bench_size(const BenchSize& s, const BenchArgs& a) {
  Config c;
  c.embed_dim = s.E;
  c.num_heads = s.H;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 0, s.N, s.L, s.L);
  Options o;
  o.backend = parse_backend(a.backend);
  if (o.backend == Backend::gpu) o.device = gpu_device();
  o.threads = a.threads;
  o.stages = stage_list(a.stages);
  o.weights_overview = a.overview;
  StageTimes st;
  if (o.backend == Backend::eigen || o.backend == Backend::gpu)
    o.stage_times = &st;  // gpu: glFinish per phase
  const int repeats = a.repeats > 0                     ? a.repeats
                      : o.backend == Backend::reference ? s.reference_repeats
                                                        : s.repeats;

  Workspace<float> ws;
  ForwardResult<float> r;
  // --fresh: what a caller without a workspace pays, every buffer allocated and first touched anew.
  // The previous result is dropped first, so that only one trace is alive at a time either way.
  if (a.head_weights >= s.H)
    throw ConfigError("--head-weights", std::to_string(a.head_weights) + " is not a head of " + s.name +
                                            " (0.." + std::to_string(s.H - 1) + ")");
  Tensor<float> head;  // (L, S): --head-weights, what a view of one head reads
  auto run_once = [&] {
    if (a.fresh) {
      r = ForwardResult<float>();
      r = forward(c, sc.weights, sc.inputs, o);
    } else {
      forward(c, sc.weights, sc.inputs, o, ws, r);
    }
    if (a.head_weights >= 0) head = stage_rows(r, "attn_weights", 0, a.head_weights, 0, r.dims.L);
  };
  platform::ProgressLine progress(std::string("mha bench ") + s.name, a.quiet);
  progress.step(0, repeats + 1, "warm-up");
  Clock::time_point t0 = Clock::now();
  run_once();  // the first run allocates the workspace and faults its pages in
  const double first_ms = ms_between(t0, Clock::now());
  // A GPU run that fell back would time the CPU under the GPU's name: refuse, with the reason.
  if (o.backend == Backend::gpu && r.backend != Backend::gpu)
    throw DeviceError("--backend", std::string("--backend gpu at ") + s.name + ": " + r.fallback_reason);
  const std::int64_t allocations_before = ws.allocations();

  std::vector<double> total, projections, scores, mask_softmax, context, out_proj, average, read_back, other;
  for (int i = 0; i < repeats; ++i) {
    progress.step(i + 1, repeats + 1);  // outside the timed part
    t0 = Clock::now();
    run_once();
    const double ms = ms_between(t0, Clock::now());
    total.push_back(ms);
    if (o.stage_times) {
      projections.push_back(st.projections);
      scores.push_back(st.scores);
      mask_softmax.push_back(st.mask_softmax);
      context.push_back(st.context);
      out_proj.push_back(st.out_proj);
      average.push_back(st.average);
      read_back.push_back(st.read_back);
      other.push_back(ms - (st.projections + st.scores + st.mask_softmax + st.context + st.out_proj +
                            st.average + st.read_back));
    }
  }
  const double median = quantile(total, 0.5);
  const std::uint64_t trace = trace_bytes(r.dims, sizeof(float), false);
  // The six matrix products (8·L·E² for the projections + 4·L·S·E for scores and context per item);
  // softmax, the scale and the average are left out, as GEMM benchmarks count.
  const double flops = cost::matmul_flops(cost::shape(r.dims));
  const std::uint64_t rss = peak_rss_bytes();
  nlohmann::json j = {
      {"size", s.name},
      {"backend", a.backend},
      {"dtype", "float32"},
      {"n", s.N},
      {"L", s.L},
      {"S", s.L},
      {"E", s.E},
      {"H", s.H},
      {"threads", o.stage_times ? st.threads : 1},  // the reference path runs on one; gpu: 0
      {"cpu_kernels", o.backend == Backend::eigen ? cpu_kernels() : "none"},
      {"workspace_reuse", !a.fresh},
      {"stages", a.stages.empty() ? "all" : a.stages},
      {"weights_overview", a.overview},
      {"head_weights", a.head_weights},
      {"repeats", repeats},
      {"median_ms", median},
      {"min_ms", quantile(total, 0)},
      {"p10_ms", quantile(total, 0.1)},
      {"p90_ms", quantile(total, 0.9)},
      {"max_ms", quantile(total, 1)},
      {"first_ms", first_ms},
      {"flops", flops},
      {"gflops", flops / (median * 1e6)},
      {"peak_rss_bytes", rss},
      {"trace_bytes", trace},
      {"peak_rss_over_trace", double(rss) / double(trace)},
      {"allocations_per_run",
       a.fresh ? nlohmann::json(nullptr)
               : nlohmann::json(double(ws.allocations() - allocations_before) / double(repeats))}};
  if (o.stage_times)
    j["stages_ms"] = {{"projections", quantile(projections, 0.5)},   {"scores", quantile(scores, 0.5)},
                      {"mask_softmax", quantile(mask_softmax, 0.5)}, {"context", quantile(context, 0.5)},
                      {"out_proj", quantile(out_proj, 0.5)},         {"average", quantile(average, 0.5)},
                      {"checks_copies_trace", quantile(other, 0.5)}};
  if (o.stage_times && o.backend == Backend::gpu) {  // shaders apart from copying the stages back
    j["stages_ms"]["read_back"] = quantile(read_back, 0.5);
    j["shaders_ms"] = quantile(projections, 0.5) + quantile(scores, 0.5) + quantile(mask_softmax, 0.5) +
                      quantile(context, 0.5) + quantile(out_proj, 0.5) + quantile(average, 0.5);
  }
  return j;
}

// Eigen float GEMM C = A·B, n×n×n (2n³ FLOPs), C's rows split over the threads as the engine splits
// its projections: the rate the engine's GEMMs could reach on this build and machine. It runs on
// the engine's kernels (sgemm_rows), so the same instruction set as the forward.
nlohmann::json bench_sgemm(const BenchArgs& a) {
  using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Index n = a.sgemm;
  const RowMatrix A = RowMatrix::Random(n, n), B = RowMatrix::Random(n, n);
  RowMatrix C(n, n);
  const int threads = std::max(1, a.threads > 0 ? a.threads : int(std::thread::hardware_concurrency()));
  auto gemm = [&] {
    auto part = [&](int t) {
      const Eigen::Index r0 = n * t / threads, r1 = n * (t + 1) / threads;
      sgemm_rows(A.data(), B.data(), C.data(), n, r0, r1);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(part, t);
    part(0);
    for (std::thread& th : pool) th.join();
  };
  const int repeats = a.repeats > 0 ? a.repeats : 10;
  platform::ProgressLine progress("mha bench sgemm", a.quiet);
  progress.step(0, repeats + 1, "warm-up");
  gemm();  // warm-up: caches, page faults
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    progress.step(i + 1, repeats + 1);
    const Clock::time_point t0 = Clock::now();
    gemm();
    ms.push_back(ms_between(t0, Clock::now()));
  }
  const double median = quantile(ms, 0.5), flops = 2.0 * double(n) * double(n) * double(n);
  return {{"sgemm_n", n},
          {"threads", threads},
          {"cpu_kernels", cpu_kernels()},
          {"repeats", repeats},
          {"median_ms", median},
          {"min_ms", quantile(ms, 0)},
          {"max_ms", quantile(ms, 1)},
          {"gflops", flops / (median * 1e6)}};
}

// The export timing: attn_weights of all 16 heads at L = 512, plus their average, as one PNG
// grid (17 panels of 512×512 cells) in ≤ 1 s. Times slicing + rendering + encoding, not the forward.
nlohmann::json bench_export(const BenchArgs& a) {
  Config c;
  c.embed_dim = 512;
  c.num_heads = 16;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 0, 1, 512, 512);
  platform::ProgressLine progress("mha bench export", a.quiet);
  progress.waiting("forward");
  const ForwardResult<float> r = forward(c, sc.weights, sc.inputs);
  exporter::StageSlice slice;
  slice.head = exporter::kAllHeads;
  const int repeats = a.repeats > 0 ? a.repeats : 3;
  std::vector<double> ms;
  std::size_t bytes = 0;
  int width = 0, height = 0;
  for (int i = 0; i < repeats; ++i) {
    progress.step(i, repeats);
    const Clock::time_point t0 = Clock::now();
    exporter::StageFigure fig = exporter::stage_figure(r, slice);
    fig.spec.font_path = platform::default_font().path;
    bytes = exporter::render_png(fig.spec).size();
    ms.push_back(ms_between(t0, Clock::now()));
    const exporter::Layout lay = exporter::layout(fig.spec);
    width = lay.width;
    height = lay.height;
  }
  return {{"size", "export_grid"},
          {"L", 512},
          {"H", 16},
          {"panels", 17},
          {"width", width},
          {"height", height},
          {"png_bytes", bytes},
          {"repeats", repeats},
          {"median_ms", quantile(ms, 0.5)},
          {"min_ms", quantile(ms, 0)},
          {"max_ms", quantile(ms, 1)}};
}

void print_human(const nlohmann::json& j) {
  std::printf(
      "%-9s %-9s %-6s N=%-2lld L=%-5lld E=%-5lld H=%-3lld  median %10.4f ms  (p10 %.4f, p90 %.4f)  %7.2f "
      "GFLOP/s\n",
      j["size"].get<std::string>().c_str(), j["backend"].get<std::string>().c_str(),
      j["cpu_kernels"].get<std::string>().c_str(), (long long)j["n"], (long long)j["L"], (long long)j["E"],
      (long long)j["H"], double(j["median_ms"]), double(j["p10_ms"]), double(j["p90_ms"]),
      double(j["gflops"]));
  std::printf("          first run %.3f ms, peak RSS %.1f MiB, trace %.1f MiB (%.2fx)\n",
              double(j["first_ms"]), double(j["peak_rss_bytes"]) / 1048576.0,
              double(j["trace_bytes"]) / 1048576.0, double(j["peak_rss_over_trace"]));
  if (j.contains("stages_ms")) {
    std::printf("          stages ms:");
    for (const auto& [name, ms] : j["stages_ms"].items()) std::printf(" %s %.4f", name.c_str(), double(ms));
    std::printf("\n");
  }
  if (j.contains("shaders_ms"))
    std::printf("          gpu: shaders %.4f ms, read-back %.4f ms (stages read back: %s)\n",
                double(j["shaders_ms"]), double(j["stages_ms"]["read_back"]),
                j["stages"].get<std::string>().c_str());
}

// Load time (mmap, the attention widened to float), then the forward of every layer with every
// trace kept; wall and CPU time of each.
nlohmann::json bench_model(const BenchArgs& a) {
  platform::ProgressLine progress("mha bench", a.quiet);
  const Clock::time_point t0 = Clock::now();
  const double cpu0 = cpu_ms();
  const LoadedModel loaded = load_model(a.model_dir, [&](double f) { progress.fraction(f, "loading"); });
  const double load_ms = ms_between(t0, Clock::now()), load_cpu_ms = cpu_ms() - cpu0;
  const std::uint64_t rss_after_load = current_rss_bytes();
  const LanguageModel& m = *loaded.model;
  const ModelSizes c = m.sizes();
  if (a.tokens < 1 || a.tokens > c.max_positions)
    throw ConfigError("--tokens", "--tokens " + std::to_string(a.tokens) + ": this model takes 1 to " + c.max_positions_field + " = " +
                                      std::to_string(c.max_positions));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(a.tokens));
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = std::int32_t((i * 7919 + 13) % std::size_t(c.vocab_size));
  ModelOptions o;
  o.threads = a.threads;
  const int repeats = a.repeats > 0 ? a.repeats : (a.tokens <= 64 ? 20 : a.tokens <= 256 ? 5 : 3);
  // Recomputed into one run, as the app recomputes after an edit: its buffers are reused.
  const std::unique_ptr<ModelRun> run = m.new_run();
  progress.step(0, repeats + 1, "warm-up");
  Clock::time_point t = Clock::now();
  double cpu_start = cpu_ms();
  m.forward(ids, o, *run);  // warm-up: first touch of the weights and the trace buffers
  const double first_ms = ms_between(t, Clock::now()), first_cpu_ms = cpu_ms() - cpu_start;
  std::vector<double> times, cpu_times;
  for (int r = 0; r < repeats; ++r) {
    progress.step(r + 1, repeats + 1);
    t = Clock::now();
    cpu_start = cpu_ms();
    m.forward(ids, o, *run);
    times.push_back(ms_between(t, Clock::now()));
    cpu_times.push_back(cpu_ms() - cpu_start);
  }
  const double median = quantile(times, 0.5);
  double checkpoint_bytes = 0;
  for (const std::string& f : loaded.weight_files) checkpoint_bytes += double(std::filesystem::file_size(f));
  return {{"model", a.model_dir},
          {"family", c.model_type},
          {"storage_dtype", c.storage_dtype},
          {"parameters", c.parameter_count},
          {"n_layer", c.n_layer},
          {"tokens", a.tokens},
          {"load_ms", load_ms},
          {"load_cpu_ms", load_cpu_ms},
          {"first_ms", first_ms},
          {"first_cpu_ms", first_cpu_ms},
          {"median_ms", median},
          {"median_cpu_ms", quantile(cpu_times, 0.5)},
          {"min_ms", quantile(times, 0.0)},
          {"min_cpu_ms", quantile(cpu_times, 0.0)},
          {"max_ms", quantile(times, 1.0)},
          {"repeats", repeats},
          {"top_token", run->top_k.empty() ? -1 : run->top_k[0].id},
          {"gflop", m.forward_flops(a.tokens) / 1e9},
          {"gflops", m.forward_flops(a.tokens) / (median * 1e6)},
          {"kernels", cpu_kernels()},
          {"checkpoint_bytes", checkpoint_bytes},
          {"rss_after_load_bytes", rss_after_load},
          {"peak_rss_bytes", peak_rss_bytes()}};
}

}  // namespace

std::function<int()> add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Time the full-trace forward (float32, no mask, recomputed into one workspace) at named sizes:\n"
      "small (N=3 L=4 E=8 H=2), teaching (N=1 L=16 E=64 H=4), medium (L=512 E=512 H=8),\n"
      "large (L=2048 E=512 H=8), xl (L=4096 E=1024 H=16). Peak RSS is the process's: for a figure\n"
      "per size, run one size per process. --sgemm N times Eigen's float GEMM instead.");
  std::vector<std::string> names = {"all"};
  for (const BenchSize& s : kSizes) names.push_back(s.name);
  cmd->add_option("--size", a->size, "a size name, or all")->check(CLI::IsMember(names));
  cmd->add_option("--backend", a->backend,
                  "cpu (Eigen), reference (explicit loops; up to medium) or gpu (GLSL compute on a headless "
                  "EGL context; times include upload and reading every stage back)")
      ->check(CLI::IsMember({"cpu", "reference", "gpu"}));
  cmd->add_option("--repeats", a->repeats, "timed runs after one warm-up (default: per size)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", a->threads, "threads for the Eigen path (default: one per hardware thread)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", a->json, "one JSON object per line instead of the table");
  cmd->add_flag("--quiet", a->quiet, "no progress line on stderr (it is shown only on a terminal)");
  cmd->add_flag("--fresh", a->fresh, "no workspace: allocate every buffer on every run");
  cmd->add_flag("--export", a->export_grid,
                "time the PNG export of the 16-head attn_weights grid at L=512 instead (goal ≤ 1 s)");
  cmd->add_option("--sgemm", a->sgemm, "time Eigen float GEMM of n×n by n×n instead (2n³ FLOPs)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--model", a->model_dir,
                  "time a model folder (GPT-2, Llama, Mistral, Qwen2) instead: its load, then the forward of "
                  "every layer with every trace "
                  "kept, at --tokens");
  cmd->add_option("--tokens", a->tokens, "with --model: tokens per forward (default 256)");
  cmd->add_option(
      "--stages", a->stages,
      "comma-separated stage names the caller reads (e.g. output or attn_weights,output); the cpu "
      "backend then keeps no (N, H, L, S) stage that is not named, the gpu backend reads back only "
      "those (default: every stage)");
  cmd->add_option("--weights-overview", a->overview,
                  "cpu: also pool and check every attn_weights row as the forward makes it, B keys to a "
                  "column (Options::weights_overview: what the app's Heads view draws at L = 2048 and more)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--head-weights", a->head_weights,
                  "cpu: also compute head H's attn_weights on demand after each forward (mha::stage_rows), "
                  "as a view of one head does; with --stages output that is the on-demand forward")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option(
         "--edit", a->edit,
         "time the recompute after one edit instead, on a causal mask, the result before it kept: "
         "mask (one cell toggled: its query row is recomputed), token (one input value: its q, k and "
         "v rows projected again, then every head) or head (one weight of head 0: that head is "
         "recomputed)")
      ->check(CLI::IsMember({"mask", "token", "head"}));
  return [a]() -> int {
    if (!a->model_dir.empty()) {
      const nlohmann::json j = bench_model(*a);
      if (a->json)
        std::printf("%s\n", j.dump().c_str());
      else
        std::printf(
            "%s %s (%s, %lld parameters, %lld layers, %s kernels): load %.0f ms (CPU %.0f ms); forward at "
            "%lld tokens, every trace kept: median %.1f ms (CPU %.1f ms; min %.1f, max %.1f, %d runs, first "
            "%.1f), %.2f GFLOP, %.1f GFLOP/s, peak RSS %.0f MiB = %.2fx the checkpoint\n",
            j["family"].get<std::string>().c_str(), a->model_dir.c_str(),
            j["storage_dtype"].get<std::string>().c_str(), (long long)j["parameters"],
            (long long)j["n_layer"], cpu_kernels(), double(j["load_ms"]), double(j["load_cpu_ms"]),
            (long long)a->tokens, double(j["median_ms"]), double(j["median_cpu_ms"]), double(j["min_ms"]),
            double(j["max_ms"]), int(j["repeats"]), double(j["first_ms"]), double(j["gflop"]),
            double(j["gflops"]), double(j["peak_rss_bytes"]) / 1048576.0,
            double(j["peak_rss_bytes"]) / std::max(1.0, double(j["checkpoint_bytes"])));
      return 0;
    }
    if (a->export_grid) {
      const nlohmann::json j = bench_export(*a);
      if (a->json)
        std::printf("%s\n", j.dump().c_str());
      else
        std::printf(
            "export grid: 16 heads + average at L=512, %dx%d PNG (%zu bytes): median %.1f ms (min %.1f, max "
            "%.1f)\n",
            int(j["width"]), int(j["height"]), std::size_t(j["png_bytes"]), double(j["median_ms"]),
            double(j["min_ms"]), double(j["max_ms"]));
      return 0;
    }
    if (a->sgemm > 0) {
      if (!limits::contains(limits::kSgemmN, a->sgemm))  // three n x n floats must fit in memory
        throw ConfigError("--sgemm",
                          limits::out_of_range("--sgemm", limits::kSgemmN, std::to_string(a->sgemm)));
      const nlohmann::json j = bench_sgemm(*a);
      if (a->json)
        std::printf("%s\n", j.dump().c_str());
      else
        std::printf("Eigen sgemm n=%d, %d threads, %s kernels: median %.3f ms, %.2f GFLOP/s\n", a->sgemm,
                    int(j["threads"]), cpu_kernels(), double(j["median_ms"]), double(j["gflops"]));
      return 0;
    }
    bool past_reference_limit = false;  // kSizes is in increasing order
    for (const BenchSize& s : kSizes) {
      const bool too_big_for_reference = past_reference_limit;
      if (std::string(s.name) == kLargestReference) past_reference_limit = true;
      if (a->size != "all" && a->size != s.name) continue;
      if (a->backend == "reference" && too_big_for_reference) {
        if (a->size != "all")
          throw ConfigError("--size", std::string("--backend reference stops at ") + kLargestReference +
                                          ": its explicit loops would take minutes per run at " + s.name +
                                          "; use --backend cpu");
        std::fprintf(stderr, "mha bench: skipping %s for the reference backend (minutes per run)\n", s.name);
        continue;
      }
      nlohmann::json j;
      if (!a->edit.empty()) {
        if (s.L < 2) continue;  // no cell below the diagonal to toggle
        j = bench_edit(s, *a);
        if (a->json)
          std::printf("%s\n", j.dump().c_str());
        else
          std::printf(
              "%-9s edit %-5s N=%-2lld L=%-5lld E=%-5lld H=%-3lld  median %10.4f ms  (p10 %.4f, p90 %.4f)"
              "  rows only %d of %d (in place %d), stages %s, peak RSS %.1f MiB\n",
              s.name, a->edit.c_str(), (long long)s.N, (long long)s.L, (long long)s.E, (long long)s.H,
              double(j["median_ms"]), double(j["p10_ms"]), double(j["p90_ms"]), int(j["rows_only"]),
              int(j["repeats"]), int(j["in_place"]), j["stages"].get<std::string>().c_str(),
              double(j["peak_rss_bytes"]) / 1048576.0);
        std::fflush(stdout);
        continue;
      }
      try {
        j = bench_size(s, *a);
      } catch (const DeviceError& e) {  // one size past the GPU's limits does not stop the others
        if (a->size != "all") throw;
        std::fprintf(stderr, "mha bench: skipping %s: %s\n", s.name, e.what());
        continue;
      }
      if (a->json)
        std::printf("%s\n", j.dump().c_str());
      else
        print_human(j);
      std::fflush(stdout);
    }
    return 0;
  };
}

}  // namespace mha::cli
