// `mha check`: a student's multi-head attention against the engine, case by case, with the mistake
// named (studio/check.hpp does the work). A Python file runs in a child python3 with torch; tensors
// computed anywhere else are checked against a scenario; --emit-test writes the scenario as a PyTorch
// test file. Exit 0 correct, 1 mistakes or unknown, 2 could not run it.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"
#include "commands.hpp"
#include "errors.hpp"
#include "io/file_io.hpp"
#include "io/npy.hpp"
#include "scenario.hpp"

namespace mha::cli {

namespace {

struct CheckArgs {
  std::string student, class_name, map, python, scenario, output, attn_weights, emit_test;
  double timeout_s = 60;
  bool json = false;
};

std::map<std::string, std::string> parse_map(const std::string& text) {
  std::map<std::string, std::string> m;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const std::size_t eq = item.find('=');
    const std::string role = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (eq == std::string::npos || eq == 0 ||
        (role != "q" && role != "k" && role != "v" && role != "o" && role != "qkv"))
      throw ConfigError("--map", "--map " + text +
                                     ": expected NAME=ROLE pairs separated by commas, ROLE one of "
                                     "q, k, v, o, qkv (e.g. --map W1=q,W2=k,W3=v,W4=o)");
    m[item.substr(0, eq)] = role;
    at = comma + 1;
  }
  return m;
}

std::string diff_text(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", d);
  return buf;
}

const char* convention_text(studio::Convention c) {
  switch (c) {
    case studio::Convention::keep: return "keep (1/True = attend, 0 = blocked: the course's tril)";
    case studio::Convention::block: return "block (True = blocked, as torch reads a bool mask)";
    case studio::Convention::additive: return "additive (0 attends, -inf blocks, added to the scores)";
  }
  return "";
}

void print_report(const studio::CheckReport& r, const std::string& source) {
  const studio::StudentRuns& s = r.student;
  std::printf("mha check: %s\n", source.c_str());
  if (!s.constructor.empty()) std::printf("  module      %s\n", s.constructor.c_str());
  if (!s.signature.empty()) std::printf("  called as   %s\n", s.signature.c_str());
  if (!s.mapping.empty()) {
    std::string m;
    for (const char* role : {"q", "k", "v", "o", "qkv"})
      if (const auto it = s.mapping.find(role); it != s.mapping.end())
        m += (m.empty() ? "" : ", ") + it->second + " -> " + role;
    std::printf("  weights     %s\n", m.c_str());
  }
  if (r.verdict == studio::Verdict::error) {
    std::printf("\ncould not run it: %s\n", r.error_message.c_str());
    if (r.error && !r.error->traceback.empty()) std::printf("\n%s", r.error->traceback.c_str());
    return;
  }
  std::printf("  mask        %s\n", r.convention ? convention_text(*r.convention) : "no masked case ran");
  std::printf("\n  %-18s %s %-11s %s\n", "case", "ok", "max |diff|", "");
  for (const studio::CaseReport& c : r.cases) {
    if (!c.ran) {
      std::printf("  %-18s %s %-11s %s\n", c.name.c_str(), "- ", "", ("skipped: " + c.skipped).c_str());
      continue;
    }
    std::string extra = c.what;
    if (c.weights_max_abs_diff >= 0) extra += "; weights " + diff_text(c.weights_max_abs_diff);
    if (!c.mask_form.empty()) extra += "; mask " + c.mask_form;
    if (!c.note.empty()) extra += "; " + c.note;
    std::printf("  %-18s %s %-11s %s\n", c.name.c_str(), c.ok ? "✓ " : "✗ ",
                diff_text(c.max_abs_diff).c_str(), extra.c_str());
  }
  std::printf("  tolerance: |yours - reference| <= %g + %g * |reference| (float32)\n", r.atol, r.rtol);
  for (const std::string& n : r.notes) std::printf("  note: %s\n", n.c_str());
  std::printf("\nverdict: %s\n", to_string(r.verdict));
  for (Mistake m : r.mistakes) {
    const MistakeInfo& i = mistake_info(m);
    std::printf("  %s: %s; fix: %s\n      (yours: %s; the app shows it in %s)\n", i.id, i.title, i.fix,
                i.wrong, i.view);
  }
  if (r.verdict == studio::Verdict::correct)
    std::printf(
        "  every case equals the engine's forward with your weights, as torch.nn.MultiheadAttention "
        "computes it\n");
  if (r.verdict == studio::Verdict::unknown)
    std::printf("  no mistake of the catalogue (alone or two together) explains it; %s\n",
                r.unknown_detail.c_str());
}

int exit_code(const studio::CheckReport& r) {
  return r.verdict == studio::Verdict::correct ? 0 : r.verdict == studio::Verdict::error ? 2 : 1;
}

int finish(const CheckArgs& a, const studio::CheckReport& r, const std::string& source) {
  if (a.json)
    std::printf("%s\n", studio::report_json(r).c_str());
  else
    print_report(r, source);
  return exit_code(r);
}

int run_scenario(const CheckArgs& a) {
  std::vector<std::string> warnings;
  const studio::Scenario s = studio::load_scenario(a.scenario, &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "mha: warning: %s\n", w.c_str());
  if (!a.emit_test.empty()) {
    const std::string text = studio::scenario_as_pytorch_test(s);
    write_file_atomic(a.emit_test, std::vector<unsigned char>(text.begin(), text.end()));
    if (!a.json)
      std::printf("wrote %s: the scenario as a PyTorch test (python3 %s)\n", a.emit_test.c_str(),
                  a.emit_test.c_str());
    if (a.output.empty()) return 0;
  }
  const Tensor<float> output = to_tensor<float>(read_npy(a.output));
  std::optional<Tensor<float>> weights;
  if (!a.attn_weights.empty()) weights = to_tensor<float>(read_npy(a.attn_weights));
  return finish(a, studio::check_tensors(s, output, weights), a.output + " for " + a.scenario);
}

}  // namespace

std::function<int()> add_check(CLI::App& app) {
  auto a = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Check your own multi-head attention against the engine, case by case, and name the mistake.\n"
      "STUDENT.py: your nn.Module runs in python3 with torch (no mask; causal; per-batch masks;\n"
      "cross-attention; L = H, d_k = 1, N = 1; a fully masked row), the engine computes each case with\n"
      "your module's own weights, finds your mask convention (keep, block or additive) and matches what\n"
      "differs against the catalogue of classic mistakes (docs/check.md).\n"
      "Without Python: --scenario S.json --output OUT.npy [--attn-weights W.npy] checks tensors you\n"
      "computed for a scenario's inputs and weights; --emit-test FILE writes the scenario as a PyTorch "
      "test.\n"
      "Exit 0 correct, 1 mistakes or unknown, 2 could not run it.");
  auto* student = cmd->add_option("student", a->student, "Your Python file (an nn.Module subclass)");
  cmd->add_option("--class", a->class_name, "Which nn.Module subclass of the file, when it defines several")
      ->needs(student);
  cmd->add_option("--map", a->map,
                  "Which of your layers is which projection, when their names do not say: NAME=ROLE,... with "
                  "ROLE q, k, v, o or qkv (one fused [3E, E] layer), e.g. --map W1=q,W2=k,W3=v,W4=o")
      ->needs(student);
  cmd->add_option("--timeout", a->timeout_s, "Seconds before your file is stopped (default 60)")
      ->check(CLI::Range(1.0, 3600.0))
      ->needs(student);
  cmd->add_option("--python", a->python,
                  "The Python to run it with (default $MHA_PYTHON, else /usr/bin/python3)")
      ->needs(student);
  auto* scenario =
      cmd->add_option("--scenario", a->scenario, "A scenario file (JSON): its inputs and weights")
          ->excludes(student);
  auto* output =
      cmd->add_option("--output", a->output, "Your output for the scenario, (N, L, E) .npy")->needs(scenario);
  cmd->add_option("--attn-weights", a->attn_weights, "Your attention weights, (N, H, L, S) or (N, L, S) .npy")
      ->needs(output);
  cmd->add_option("--emit-test", a->emit_test,
                  "Write the scenario as a runnable PyTorch test file (inputs, weights loaded into "
                  "nn.MultiheadAttention, the expected output and the tolerance)")
      ->needs(scenario);
  cmd->add_flag(
      "--json", a->json,
      "Print the report as JSON: {\"verdict\", \"mistakes\", \"mask_convention\", \"cases\": [{\"name\", "
      "\"ok\", \"max_abs_diff\"}], ...}");
  return [a]() -> int {
    if (!a->scenario.empty()) {
      if (a->output.empty() && a->emit_test.empty())
        throw ConfigError("--output", "--scenario needs --output OUT.npy (your result) or --emit-test FILE");
      return run_scenario(*a);
    }
    if (a->student.empty())
      throw ConfigError("student",
                        "give your Python file (mha check STUDENT.py) or --scenario S.json --output OUT.npy");
    studio::PythonCheckOptions o;
    o.python = a->python;
    o.class_name = a->class_name;
    o.timeout_s = a->timeout_s;
    if (!a->map.empty()) o.map = parse_map(a->map);
    try {
      return finish(*a, studio::check_python_file(a->student, o), a->student);
    } catch (const studio::CheckRunError& e) {
      if (a->json) {
        const nlohmann::json j = {{"verdict", nullptr},
                                  {"mistakes", nlohmann::json::array()},
                                  {"mask_convention", nullptr},
                                  {"cases", nlohmann::json::array()},
                                  {"error", {{"kind", e.kind}, {"message", e.what()}}}};
        std::printf("%s\n", j.dump(2).c_str());
      } else
        std::fprintf(stderr, "mha check: %s\n", e.what());
      return 2;
    }
  };
}

}  // namespace mha::cli
