// Bad input in the app, without a window: pasted and typed text (regressions of the parser bugs
// fuzzing and review found), scenario files whose tensors disagree with their sizes, files that
// are not files, huge sizes shown inline with their bytes, view changes that are autosaved, and an
// app font that is not a font.
#include <imgui.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "app_state.hpp"
#include "errors.hpp"
#include "fonts.hpp"
#include "temp_dir.hpp"
#include "text_parse.hpp"

using namespace mha::studio;
using Catch::Contains;

namespace {
std::vector<float> numbers(const std::string& s) {
  return parse_numbers(s);
}
bool same(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}
nlohmann::json notebook_json() {
  return nlohmann::json::parse(to_json(Scenario{}));
}
}  // namespace

TEST_CASE("pasted printouts: every value, none of the words' digits, signed inf", "[reliability]") {
  // torch: the dtype, device and grad_fn digits used to be read as values, and -inf as +inf.
  CHECK(same(numbers("tensor([[0.5, -inf], [nan, 1e-3]], dtype=torch.float32, device='cuda:0', "
                     "grad_fn=<AddBackward0>)"),
             {0.5f, -INFINITY, NAN, 1e-3f}));
  CHECK(same(numbers("array([[ 1.5e-45, -0.  ,  inf],\n       [-1.,  2.,  .5]], dtype=float32)"),
             {1.5e-45f, -0.0f, INFINITY, -1.0f, 2.0f, 0.5f}));
  CHECK(same(numbers("1e30 -1e39 +2 -.25 Infinity -NaN"), {1e30f, -INFINITY, 2.0f, -0.25f, INFINITY, NAN}));
  CHECK(numbers("").empty());
  CHECK(numbers("'unterminated 1 2").empty());
}

TEST_CASE("a typed mask cell: finite or -inf, anything else says why", "[reliability]") {
  float v = 7;
  std::string error;
  CHECK(parse_mask_value(" -inf ", &v, &error));
  CHECK(v == -INFINITY);
  CHECK(parse_mask_value("-1.5", &v, &error));
  CHECK(v == -1.5f);
  v = 7;
  CHECK_FALSE(parse_mask_value("inf", &v, &error));
  CHECK_THAT(error, Contains("NaN or +inf"));
  CHECK_FALSE(parse_mask_value("nan", &v, &error));
  CHECK_FALSE(parse_mask_value("1.5x", &v, &error));
  CHECK_THAT(error, Contains("not a number"));
  CHECK_FALSE(parse_mask_value("", &v, &error));
  CHECK(v == 7);
}

TEST_CASE("a scenario whose tensors disagree with its sizes loads, and the error is inline",
          "[reliability]") {
  AppState s;
  s.recompute();
  REQUIRE(s.result.valid());
  const auto kept = s.result.forward;
  nlohmann::json j = notebook_json();
  j["tensors"]["query"] = {{"shape", {2, 4, 8}}, {"data", std::vector<float>(64, 0.5f)}};  // N is 3
  s.load(scenario_from_json(j.dump(), "disagree.json"), "open");
  CHECK_FALSE(s.errors.empty());
  std::string all;
  for (const auto& [slot, message] : s.errors) all += slot + ": " + message + "\n";
  CHECK_THAT(all, Contains("query"));
  CHECK(s.result.forward == kept);  // the last valid result stays on screen
  CHECK(s.stale);
}

TEST_CASE("scenario side files that are devices or folders are refused, not read forever", "[reliability]") {
  nlohmann::json j = notebook_json();
  j["tensors"]["query"] = {{"npy", "/dev/zero"}};
  CHECK_THROWS_WITH(scenario_from_json(j.dump(), "dev.json"),
                    Contains("tensors.query") && Contains("not a regular file"));
}

TEST_CASE("huge sizes are refused inline with the bytes and the last result stays", "[reliability]") {
  AppState s;
  s.recompute();
  const auto kept = s.result.forward;
  s.now = 1;
  s.apply(set_control("embed_dim", "1024"));
  s.apply(set_control("num_heads", "16"));
  s.apply(set_control("tgt_len", std::to_string(1 << 20)));  // the size field's maximum
  for (int i = 0; i < 2000 && s.computer.busy(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  s.tick(2);
  REQUIRE(s.errors.count("sizes"));
  CHECK_THAT(s.errors["sizes"], Contains("bytes"));
  CHECK(s.result.forward == kept);
  // A mask at those sizes is refused the same way, before its cells are allocated.
  CHECK_FALSE(s.apply(set_mask_preset("causal")));
  CHECK_THAT(s.errors["mask"], Contains("more than"));
  CHECK(s.scenario().mask.cells.empty());
  CHECK(s.scenario().mask.preset == MaskPreset::none);  // refused: nothing half-applied
}

TEST_CASE("a view change alone (the view shown) is autosaved after the quiet second", "[reliability]") {
  mha::test::TempDir dir;
  AppState s;
  s.autosave_path = dir.file("autosave.json");
  s.tick(1);
  CHECK_FALSE(std::filesystem::exists(s.autosave_path));  // nothing changed: nothing written
  s.apply(show_view(ViewTab::mask));                      // as the tab bar does: no undo step
  s.tick(2);
  s.tick(2.5);
  CHECK_FALSE(std::filesystem::exists(s.autosave_path));
  s.tick(3.1);
  REQUIRE(std::filesystem::exists(s.autosave_path));
  CHECK(load_scenario(s.autosave_path).suggested_tab == ViewTab::mask);
  CHECK_FALSE(s.history.can_undo());
}

TEST_CASE("an app font that is empty, truncated or a FIFO falls back with the reason", "[reliability][ui]") {
  // The bytes are validated before ImGui's stb_truetype sees them (it reads out of bounds on a
  // truncated font and crashes on an empty one); a FIFO is refused without blocking.
  std::ifstream good_file(std::string(MHA_ASSETS_DIR) + "/fonts/DejaVuSans.ttf", std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(good_file)), std::istreambuf_iterator<char>());
  REQUIRE(good.size() > 4096);
  for (const char* kind : {"empty", "truncated", "fifo"}) {
    INFO(kind);
    mha::test::TempDir assets;
    std::filesystem::create_directory(assets.path / "fonts");
    const std::string ttf = assets.file("fonts/DejaVuSans.ttf");
    if (std::string(kind) == "fifo") {
      REQUIRE(::mkfifo(ttf.c_str(), 0600) == 0);
    } else {
      std::ofstream(ttf, std::ios::binary) << (std::string(kind) == "empty" ? "" : good.substr(0, 4096));
    }
    ImGui::CreateContext();
    const std::string message = mha::app::load_fonts(assets.path.string(), 17);
    CHECK_THAT(message, Contains(ttf) && Contains("using"));
    CHECK(ImGui::GetIO().Fonts->IsBuilt());
    CHECK(ImGui::GetIO().Fonts->Fonts.Size == 1);
    ImGui::DestroyContext();
  }
  // The shipped font itself passes.
  ImGui::CreateContext();
  CHECK(mha::app::load_fonts(MHA_ASSETS_DIR, 17).empty());
  ImGui::DestroyContext();
}
