// The bad-input matrix beyond the engine's own (test_bad_input.cpp): special values against
// torch, files that are not files, weight files under wrong names or shapes, refused huge sizes,
// atomic writes, exports to unwritable places, and the crashes the fuzzers found (regressions).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "compute.hpp"
#include "errors.hpp"
#include "fixtures.hpp"
#include "heatmap_export.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "io/state_dict.hpp"
#include "scenario.hpp"
#include "temp_dir.hpp"
#include "torch_rng.hpp"

using namespace mha;
using Catch::Contains;
using mha::test::Fixture;
using mha::test::load_fixture;
using mha::test::load_tensor;
using mha::test::TempDir;

TEST_CASE("NaN, Inf, 1e30 and subnormal inputs give torch's numbers and are counted", "[reliability]") {
  // Every stage against torch is checked by the case table (test_cases.cpp); here: what is special.
  const Fixture<float> f = load_fixture<float>("nonfinite_inputs");
  for (Backend b : {Backend::reference, Backend::eigen}) {
    Options o = f.options;
    o.backend = b;
    const ForwardResult<float> r = forward(f.config, f.weights, f.inputs, o);
    INFO("backend " << backend_name(b));
    CHECK(r.nonfinite_inputs == 2);   // one NaN, one +Inf; 1e30 and subnormals are finite
    CHECK(r.fully_masked_rows == 0);  // NaN from the inputs is not masking
    const Tensor<float> out = r.output();
    const Tensor<float> want = load_tensor<float>("nonfinite_inputs", "expected/module_output");
    for (std::int64_t n = 0; n < 2; ++n)
      for (std::int64_t l = 0; l < 4; ++l) {
        const bool nan_row = (n == 0 && l == 1) || (n == 1 && l == 0);
        for (std::int64_t e = 0; e < 8; ++e) {
          const float got = out.data[std::size_t((n * 4 + l) * 8 + e)];
          const float exp = want.data[std::size_t((n * 4 + l) * 8 + e)];
          INFO("n " << n << " l " << l << " e " << e);
          CHECK(std::isnan(got) == nan_row);
          CHECK(std::isnan(exp) == nan_row);
          if (!nan_row) CHECK(std::abs(got - exp) <= 1e-4 * std::abs(exp) + 1e-6);
        }
      }
  }
}

TEST_CASE("a device, FIFO or folder is refused at once, not read forever", "[reliability]") {
  // Found by reading the scenario loader: {"npy": "/dev/zero"} used to read until memory ran out.
  CHECK_THROWS_WITH(read_npy("/dev/zero"), Contains("/dev/zero: cannot read: not a regular file"));
  TempDir dir;
  const std::string fifo = dir.file("pipe.npy");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_npy(fifo), Contains("pipe.npy: cannot read: not a regular file"));
  CHECK_THROWS_WITH(read_safetensors(dir.path.string()), Contains("cannot read: Is a directory"));
  CHECK_THROWS_AS(read_npy(dir.file("missing.npy")), FileError);
}

TEST_CASE("weight files with wrong names or shapes are refused, naming the tensor", "[reliability]") {
  TempDir dir;
  Config c;
  c.embed_dim = 8;
  c.num_heads = 2;
  const SeededCase<float> sc = torch_seeded_case<float>(c, 0, 1, 3, 3);
  std::map<std::string, Array> st;
  st["in_proj.weight"] = to_array(sc.weights.in_proj_weight);  // a typo of in_proj_weight
  st["out_proj.weight"] = to_array(sc.weights.out_proj_weight);
  write_safetensors(dir.file("typo.safetensors"), st);
  CHECK_THROWS_WITH(read_state_dict<float>("", dir.file("typo.safetensors")),
                    Contains("'in_proj.weight' are not nn.MultiheadAttention state_dict names") &&
                        Contains("in_proj_weight"));

  st.erase("in_proj.weight");
  Tensor<float> wrong({5, 8});
  st["in_proj_weight"] = to_array(wrong);
  write_safetensors(dir.file("shape.safetensors"), st);
  const Weights<float> w = read_state_dict<float>("", dir.file("shape.safetensors"));
  CHECK_THROWS_AS(forward(c, w, sc.inputs, Options{}), ShapeError);
  CHECK_THROWS_WITH(forward(c, w, sc.inputs, Options{}), Contains("in_proj_weight"));

  std::vector<unsigned char> bytes = read_file_bytes(dir.file("shape.safetensors"));
  bytes.resize(bytes.size() - 7);  // truncated
  write_file_atomic(dir.file("cut.safetensors"), bytes);
  CHECK_THROWS_WITH(read_state_dict<float>("", dir.file("cut.safetensors")), Contains("truncated"));
}

TEST_CASE("huge sizes are refused before allocating, with the bytes they would need", "[reliability]") {
  Config c;
  c.embed_dim = 1024;
  c.num_heads = 16;
  try {
    (void)torch_seeded_case<float>(c, 0, 1, 1 << 20, 1 << 20);
    FAIL("expected TooLargeError");
  } catch (const TooLargeError& e) {
    CHECK(e.bytes == trace_bytes(dims_for(c, 1, 1 << 20, 1 << 20), sizeof(float), false));
    CHECK(e.bytes > e.limit_bytes);
    CHECK_THAT(e.what(), Contains(std::to_string(e.bytes)) || Contains("GB") || Contains("TB"));
  }
}

TEST_CASE("atomic writes leave the old file when they fail, and no temp file", "[reliability]") {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  write_file_atomic(path, {1, 2, 3});
  // A folder where the temp file would be replaced: the rename fails and the old bytes stay.
  // (A write that fails part-way: `safe writes: unique temp names, ...` in test_hostile.cpp.)
  const std::string folder = dir.file("f.bin");
  std::filesystem::create_directories(folder + "/inside");
  CHECK_THROWS_WITH(write_file_atomic(folder, {9, 9}), Contains(folder) && Contains("folder"));
  CHECK(std::filesystem::is_directory(folder + "/inside"));
  write_file_atomic(path, {4});
  CHECK(read_file_bytes(path) == std::vector<unsigned char>{4});
  for (const auto& e : std::filesystem::directory_iterator(dir.path))
    CHECK_FALSE(is_temp_name(e.path().filename().string()));
  // A file where a folder should be (ENOTDIR): refused with the path, whoever runs the test.
  CHECK_THROWS_WITH(write_file_atomic(dir.file("a.bin/x.npy"), {1}), Contains("a.bin/x.npy"));
}

TEST_CASE("exporting to an unwritable place is a FileError with the reason", "[reliability]") {
  TempDir dir;
  const char png[] = "not really a png";
  CHECK_THROWS_AS(exporter::write_file(dir.file("no/such/folder/x.png"), png, sizeof png), FileError);
  CHECK_THROWS_WITH(exporter::write_file(dir.file("no/such/folder/x.png"), png, sizeof png),
                    Contains("no/such/folder/x.png"));
  // /dev/full: every write fails with "No space left on device", as a full disk does.
  CHECK_THROWS_WITH(exporter::write_file("/dev/full", png, sizeof png), Contains("/dev/full"));
}

TEST_CASE("a scenario file with batch 0 and a per-batch or per-head mask loads, then is refused",
          "[reliability]") {
  // fuzz_scenario (UBSan): every preset's rows were written through the empty cell vector.
  for (const char* preset : {"causal", "sliding_window", "block_diagonal", "prefix_lm", "random", "padding"})
    for (const char* scope : {"per_batch", "per_head"}) {
      INFO(preset << " " << scope);
      const std::string text = std::string(R"({"format": "mha-studio-scenario", "version": 1,
          "sizes": {"batch": 0, "tgt_len": 10, "src_len": 10, "embed_dim": 64, "num_heads": 8},
          "mask": {"preset": ")") +
                               preset + R"(", "scope": ")" + scope + R"("}})";
      const studio::Scenario s = studio::scenario_from_json(text, "batch0.json");
      CHECK(s.mask.cells.empty());
      CHECK_THROWS_WITH(studio::build_forward(s), Contains("must be positive"));
    }
}
