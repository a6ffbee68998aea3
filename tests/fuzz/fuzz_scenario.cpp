// libFuzzer target: the scenario loader as the app runs it on File > Open or the autosave: parse,
// fit the mask to the sizes, write it back (the written JSON must parse to the same JSON), the
// "Copy as PyTorch" text, and, when small, build the engine inputs and run the forward.
// Typed errors (mha::Error) are answers; crashes, sanitizer reports and round-trip drift are bugs.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "compute.hpp"
#include "errors.hpp"
#include "scenario.hpp"

using namespace mha::studio;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Scenario s;
  try {
    s = scenario_from_json(text, "fuzz.json");
  } catch (const mha::FileError&) {
    return 0;
  }
  // Saving and reloading costs about 0.1 µs a stored value in Release and 20× that under ASan: a
  // custom mask near the 2^24-cell limit takes tens of seconds there, which is size, not a hang
  // (found as a libFuzzer timeout; test_scenario round-trips a 2-million-cell mask instead).
  const std::size_t stored = s.mask.cells.size() + s.mask.key_padding.size() +
                             (s.query ? s.query->data.size() : 0) + (s.key ? s.key->data.size() : 0) +
                             (s.value ? s.value->data.size() : 0);
  if (stored > (1u << 18)) return 0;
  const std::string saved = to_json(s);
  try {
    if (to_json(scenario_from_json(saved, "saved.json")) != saved) {
      std::fprintf(stderr, "round trip changed the scenario:\n%s\n", saved.c_str());
      std::abort();
    }
  } catch (const mha::Error& e) {
    std::fprintf(stderr, "a saved scenario does not load: %s\n%s\n", e.what(), saved.c_str());
    std::abort();
  }
  try {
    fit_mask_to_sizes(s);
  } catch (const mha::TooLargeError&) {
    return 0;
  }
  if (s.mask.cells.size() + s.mask.key_padding.size() < 4096) (void)mask_as_pytorch(s);
  if (forward_work(s) > 1e5) return 0;  // the fuzzer looks for bugs, not for big forwards
  try {
    const Built b = build_forward(s);
    (void)mha::forward(b.config, b.weights, b.inputs, b.options);
  } catch (const mha::Error&) {
  }
  return 0;
}
