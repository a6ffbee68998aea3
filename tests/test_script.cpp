// The scripted UI's language without a window: words, the checks made before anything runs, and
// docs/scripting.md naming every action, control and result field; docs/scenario.md every key.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "actions.hpp"
#include "script.hpp"

using namespace mha::app;
using namespace mha::studio;
using Catch::Matchers::Contains;

namespace {
std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
std::string parse_error(const std::string& text) {
  try {
    Script::parse(text, "s.txt");
  } catch (const ScriptError& e) {
    return e.message;
  }
  return "";
}
}  // namespace

TEST_CASE("script lines split into words, quotes group, # comments", "[script]") {
  CHECK(script_words("set sentence \"the cat  sat\" # a comment") ==
        std::vector<std::string>{"set", "sentence", "the cat  sat"});
  CHECK(script_words("set \"H num_heads\" 4") == std::vector<std::string>{"set", "H num_heads", "4"});
  CHECK(script_words("set sentence \"say \\\"hi\\\"\"") ==
        std::vector<std::string>{"set", "sentence", "say \"hi\""});
  CHECK(script_words("   # only a comment").empty());
  CHECK_THROWS_AS(script_words("set sentence \"open"), ScriptError);
}

TEST_CASE("a bad script is refused before it runs, with the line", "[script]") {
  CHECK(parse_error("undo\n\n# c\nredo\n").empty());
  CHECK_THAT(parse_error("undo\npaint 1 2\n"), Contains("s.txt:2: unknown action \"paint\""));
  CHECK_THAT(parse_error("mask-paint 1\n"), Contains("s.txt:1: mask-paint takes 2 to 3 arguments"));
  CHECK_THAT(parse_error("undo now\n"), Contains("s.txt:1: undo takes 0 arguments"));
  CHECK_THAT(parse_error("set sentence \"open\n"), Contains("s.txt:1: a quote is not closed"));
}

TEST_CASE("controls refuse what their widgets would not allow", "[script]") {
  CHECK_THROWS_WITH(set_control("heads", "2"), Contains("no control \"heads\""));
  CHECK_THROWS_WITH(set_control("num_heads", "0"), Contains("from 1"));
  CHECK_THROWS_WITH(set_control("H num_heads", "two"), Contains("expected an integer"));
  CHECK_THROWS_WITH(set_control("bias", "maybe"), Contains("true or false"));
  CHECK_THROWS_WITH(set_control("font_scale", "9"), Contains("from 1"));
  CHECK_THROWS_WITH(set_mask_preset("diagonal"), Contains("no mask preset"));
  Scenario s;
  WindowState w;
  for (const ControlInfo& c : controls()) {  // every control takes back the value it shows
    INFO(c.id);
    const std::string v = control_value(s, w, c.id);
    if (std::string(c.id) == "model" || std::string(c.id) == "layer") continue;  // need a model
    Scenario t = s;
    WindowState u = w;
    run(set_control(c.label, v), t, u);
    CHECK(control_value(t, u, c.id) == v);
  }
}

TEST_CASE("docs/scripting.md names every action and every control", "[script][docs]") {
  const std::string doc = read(std::string(MHA_SOURCE_DIR) + "/docs/scripting.md");
  REQUIRE_FALSE(doc.empty());
  for (const std::string& a : Script::action_names()) {
    INFO("action " << a);
    CHECK(doc.find("| `" + a) != std::string::npos);
  }
  for (const ControlInfo& c : controls()) {
    INFO("control " << c.id);
    CHECK(doc.find(std::string("| `") + c.id + "` | " + c.label + " |") != std::string::npos);
  }
}

TEST_CASE("docs/scripting.md names every field of dump-state's result", "[script][docs]") {
  const std::string doc = read(std::string(MHA_SOURCE_DIR) + "/docs/scripting.md");
  const std::size_t table = doc.find("The `result` object of `dump-state`");
  REQUIRE(table != std::string::npos);
  const std::string section = doc.substr(table, doc.find("## Controls") - table);
  for (const std::string& f : Script::result_fields()) {
    INFO("result field " << f);
    CHECK(section.find("| `" + f + "`") != std::string::npos);
  }
}

TEST_CASE("the what-if controls are controls: set reaches them, and back to torch", "[script]") {
  Scenario s;
  set_control("temperature T", "2.5").change(s);
  set_control("scale_by_sqrt_dk", "false").change(s);
  CHECK(s.what_if.temperature == 2.5f);
  CHECK_FALSE(s.what_if.scale_by_sqrt_dk);
  CHECK(s.what_if.active());
  CHECK(set_control("temperature", "1").slot == "what_if");
  CHECK_THROWS_WITH(set_control("temperature", "0"), Contains("from 0.1"));
  set_control("temperature", "1").change(s);
  set_control("divide by sqrt(d_k)", "true").change(s);
  CHECK_FALSE(s.what_if.active());
}

namespace {
// Every key of a JSON object, recursively ("view.tab"), tensors' and arrays' insides aside.
void keys_of(const nlohmann::json& j, const std::string& path, std::vector<std::string>* out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    out->push_back(it.key());
    if (it.value().is_object() && path != "tensors" && it.key() != "key_padding" && it.key() != "cells")
      keys_of(it.value(), it.key(), out);
  }
}
}  // namespace

TEST_CASE("docs/scenario.md names every key a scenario file can hold", "[script][docs]") {
  const std::string doc = read(std::string(MHA_SOURCE_DIR) + "/docs/scenario.md");
  REQUIRE_FALSE(doc.empty());
  // A scenario with every optional part: a model, a what-if, a custom mask with key padding, edited
  // tensors, every view field.
  Scenario s;
  s.model = "tiny";
  s.layer = 1;
  s.what_if.temperature = 2;
  s.what_if.scale_by_sqrt_dk = false;
  set_mask_preset("padding").change(s);
  fit_mask_to_sizes(s);
  s.mask.preset = MaskPreset::custom;
  s.mask.cells_shape = {s.L(), s.S()};
  s.mask.cells.assign(std::size_t(s.L() * s.S()), 0.0f);
  s.query = mha::Tensor<float>({s.batch, s.L(), s.embed_dim});
  s.key = mha::Tensor<float>({s.batch, s.S(), s.embed_dim});
  s.value = mha::Tensor<float>({s.batch, s.S(), s.embed_dim});
  s.view.hidden_heads = {1};
  const nlohmann::json j = nlohmann::json::parse(to_json(s));
  std::vector<std::string> keys;
  keys_of(j, "", &keys);
  for (const char* part : {"sizes", "mask", "view", "what_if", "tensors", "model", "layer"}) {
    INFO("the test's scenario writes " << part);
    CHECK(std::find(keys.begin(), keys.end(), part) != keys.end());
  }
  for (const std::string& k : keys) {
    INFO("key " << k);
    CHECK(doc.find("`" + k + "`") != std::string::npos);
  }
}
