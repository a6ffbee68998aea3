// Times a Llama-family checkpoint on the CPU: opening the folder (load_llama), one forward of T tokens
// through every layer with every stage of the trace kept (llama_forward, the first run and the best
// of the repeats), and the process's peak resident memory against the checkpoint's size.
//
//   bench_llama DIR [--tokens 32] [--repeat 3] [--threads 0] [--backend cpu|reference]
//
// DIR is a Hugging Face folder (config.json + model.safetensors or shards); tools/make_random_llama.py
// writes ones with real models' shapes. The token ids are fixed pseudo-random ids in the vocabulary.
#include <sys/resource.h>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "errors.hpp"
#include "io/hf_checkpoint.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// CPU seconds this process has used, every thread: on a shared machine, what the work cost
// whatever else was running.
double cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
          double(u.ru_utime.tv_usec + u.ru_stime.tv_usec)) /
         1e3;
}

double current_rss_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: bench_llama DIR [--tokens 32] [--repeat 3] [--threads 0] [--backend cpu|reference]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string dir = argv[1];
  std::int64_t tokens = 32;
  int repeat = 3, threads = 0;
  mha::Backend backend = mha::Backend::eigen;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage();
    const std::string v = argv[++i];
    if (a == "--tokens")
      tokens = std::atoll(v.c_str());
    else if (a == "--repeat")
      repeat = std::atoi(v.c_str());
    else if (a == "--threads")
      threads = std::atoi(v.c_str());
    else if (a == "--backend" && (v == "cpu" || v == "reference"))
      backend = v == "cpu" ? mha::Backend::eigen : mha::Backend::reference;
    else
      usage();
  }
  try {
    double file_mb = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") file_mb += double(e.file_size()) / (1024.0 * 1024.0);

    const Clock::time_point t_open = Clock::now();
    const double cpu_open = cpu_ms();
    const mha::LoadedLlama loaded = mha::load_llama(dir);
    const double open_ms = ms_since(t_open), open_cpu = cpu_ms() - cpu_open;
    const mha::LlamaModel& m = loaded.model;
    const mha::LlamaConfig& c = m.config;
    std::printf(
        "%s: %s, %lld layers, hidden %lld, %lld heads over %lld kv heads, intermediate %lld, vocab %lld, "
        "%s\n",
        dir.c_str(), c.model_type.c_str(), (long long)c.num_hidden_layers, (long long)c.hidden_size,
        (long long)c.num_attention_heads, (long long)c.kv_heads(), (long long)c.intermediate_size,
        (long long)c.vocab_size, m.storage_dtype.c_str());
    std::printf("checkpoint    %.0f MiB, %.1f M parameters\n", file_mb, double(m.parameter_count()) / 1e6);
    std::printf("open          %.0f ms wall, %.0f ms CPU  (RSS after open %.0f MiB)\n", open_ms, open_cpu,
                current_rss_mb());
    for (const std::string& w : loaded.warnings) std::printf("  warning: %s\n", w.c_str());

    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
    for (std::int64_t t = 0; t < tokens; ++t)
      ids[std::size_t(t)] = std::int32_t((t * 7919 + 13) % c.vocab_size);
    mha::LlamaOptions o;
    o.backend = backend;
    o.threads = threads;
    mha::LlamaRun run;
    double first = 0, best = 1e300, first_cpu = 0, best_cpu = 1e300;
    for (int r = 0; r < std::max(repeat, 1); ++r) {
      const Clock::time_point t0 = Clock::now();
      const double c0 = cpu_ms();
      mha::llama_forward(m, ids, o, run);
      const double ms = ms_since(t0), cpu = cpu_ms() - c0;
      if (r == 0) first = ms, first_cpu = cpu;
      best = std::min(best, ms);
      best_cpu = std::min(best_cpu, cpu);
    }
    std::printf(
        "forward       %lld tokens, every stage kept (%s, %d threads): first %.0f ms wall (%.0f ms CPU), "
        "best of %d %.0f ms wall, least CPU %.0f ms\n",
        (long long)tokens, mha::backend_name(backend), threads, first, first_cpu, std::max(repeat, 1), best,
        best_cpu);
    std::printf("top token     %d (logit %.4f)\n", run.top_k.empty() ? -1 : run.top_k[0].id,
                run.top_k.empty() ? 0.0 : double(run.top_k[0].logit));
    const double peak = peak_rss_mb();
    std::printf("peak RSS      %.0f MiB = %.2f x the checkpoint\n", peak, file_mb > 0 ? peak / file_mb : 0.0);
  } catch (const mha::Error& e) {
    std::fprintf(stderr, "bench_llama: %s\n", e.what());
    return 1;
  }
  return 0;
}
