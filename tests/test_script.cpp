// The scripted UI's language without a window: words, the checks made before anything runs, and
// docs/scripting.md naming every action and every control.
#include <catch2/catch.hpp>
#include <fstream>
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
  for (const ControlInfo& c : controls()) {  // every control takes back the value it shows
    INFO(c.id);
    const std::string v = control_value(s, c.id);
    if (std::string(c.id) == "model" || std::string(c.id) == "layer") continue;  // need a model
    Scenario t = s;
    set_control(c.label, v).change(t);
    CHECK(control_value(t, c.id) == v);
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
