// A PNG on the desktop's clipboard, through the helper the session has: wl-copy on Wayland, xclip on
// X11 (Dear ImGui and GLFW put text only). Where neither runs, the caller disables its menu item and
// shows image_clipboard_missing()'s reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mha::platform {

// The helper's argv for a PNG ({"wl-copy", "--type", "image/png"} or {"xclip", "-selection",
// "clipboard", "-t", "image/png"}); empty when none can be used in this session.
std::vector<std::string> image_clipboard_argv();
// "" when a PNG can be copied, else why not (which program to install).
std::string image_clipboard_missing();
// Hands `png` to the helper on a thread of its own; the outcome ("copied ..." or the failure) comes
// back through take_image_clipboard_message.
void copy_png_to_clipboard(std::vector<std::uint8_t> png, std::string what);
std::optional<std::string> take_image_clipboard_message();

}  // namespace mha::platform
