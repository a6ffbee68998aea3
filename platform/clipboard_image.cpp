// See clipboard_image.hpp. Both helpers read the image from stdin, then keep serving the clipboard
// from a background process of their own, so stdout is not captured (it would stay open).
#include "clipboard_image.hpp"

#include <cstdlib>
#include <mutex>
#include <thread>

#include "subprocess.hpp"

namespace mha::platform {

namespace {

std::mutex g_mutex;
std::optional<std::string> g_message;

bool set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

}  // namespace

std::vector<std::string> image_clipboard_argv() {
  if (set("WAYLAND_DISPLAY") && !find_program("wl-copy").empty()) return {"wl-copy", "--type", "image/png"};
  if (set("DISPLAY") && !find_program("xclip").empty())
    return {"xclip", "-selection", "clipboard", "-t", "image/png"};
  return {};
}

std::string image_clipboard_missing() {
  if (!image_clipboard_argv().empty()) return "";
  if (set("WAYLAND_DISPLAY")) return "copying an image needs wl-copy (package wl-clipboard)";
  if (set("DISPLAY")) return "copying an image needs xclip (package xclip)";
  return "no desktop session to copy an image to";
}

void copy_png_to_clipboard(std::vector<std::uint8_t> png, std::string what) {
  const std::vector<std::string> argv = image_clipboard_argv();
  std::thread([argv, png = std::move(png), what = std::move(what)] {
    std::string message;
    if (argv.empty()) {
      message = image_clipboard_missing();
    } else {
      ProcessOptions o;
      o.input.assign(png.begin(), png.end());
      o.capture_stdout = false;
      const ProcessResult r = run_process(argv, o);
      message = !r.started ? r.error
                : r.exit_code == 0
                    ? "copied " + what + " as a PNG image"
                    : argv[0] + " could not take the image (status " + std::to_string(r.exit_code) + ")";
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    g_message = message;
  }).detach();
}

std::optional<std::string> take_image_clipboard_message() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::optional<std::string> m = std::move(g_message);
  g_message.reset();
  return m;
}

}  // namespace mha::platform
