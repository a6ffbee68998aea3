#include "window_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "io/file_io.hpp"

namespace mha::app {

namespace fs = std::filesystem;

std::string window_config_path() {
  fs::path base;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x)
    base = x;
  else if (const char* home = std::getenv("HOME"); home && *home)
    base = fs::path(home) / ".config";
  else
    return "";
  return (base / "mha-studio" / "window.json").string();
}

WindowConfig load_window_config(const std::string& path) {
  WindowConfig c;
  if (path.empty()) return c;
  try {
    const std::vector<unsigned char> bytes = read_file_bytes(path, 1 << 16);
    const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
    auto get_int = [&](const char* k, int* out, int lo, int hi) {
      if (j.contains(k) && j[k].is_number_integer()) *out = std::clamp(j[k].get<int>(), lo, hi);
    };
    auto get_bool = [&](const char* k, bool* out) {
      if (j.contains(k) && j[k].is_boolean()) *out = j[k].get<bool>();
    };
    get_int("width", &c.width, 64, 16384);
    get_int("height", &c.height, 64, 16384);
    studio::WindowState& w = c.window;
    get_bool("layout_chosen", &w.layout_chosen);
    get_bool("show_controls", &w.show_controls);
    get_bool("show_inspector", &w.show_inspector);
    get_bool("focus", &w.focus);
    get_bool("presenter", &w.presenter);
    if (j.contains("font_scale") && j["font_scale"].is_number()) {
      const double f = j["font_scale"].get<double>();
      if (std::isfinite(f)) w.font_scale = float(std::clamp(f, 1.0, 3.0));
    }
    if (j.contains("colormap") && j["colormap"].is_string())
      for (render::Colormap m : {render::Colormap::viridis, render::Colormap::magma,
                                 render::Colormap::cividis, render::Colormap::diverging})
        if (j["colormap"].get<std::string>() == render::to_string(m)) w.colormap = m;
  } catch (const Error&) {  // missing or unreadable: the defaults
  } catch (const nlohmann::json::exception&) {
  }
  return c;
}

bool save_window_config(const std::string& path, const WindowConfig& c) {
  if (path.empty()) return false;
  const nlohmann::json j = {{"width", c.width},
                            {"height", c.height},
                            {"layout_chosen", c.window.layout_chosen},
                            {"show_controls", c.window.show_controls},
                            {"show_inspector", c.window.show_inspector},
                            {"focus", c.window.focus},
                            {"presenter", c.window.presenter},
                            {"font_scale", c.window.font_scale},
                            {"colormap", render::to_string(c.window.colormap)}};
  const std::string text = j.dump(2) + "\n";
  try {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    write_file_atomic(path, std::vector<unsigned char>(text.begin(), text.end()));
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace mha::app
