#include "views.hpp"

#include <cctype>

#include "stage_table.hpp"

namespace mha::studio {

namespace {

// What Left / Right do where they step the stage: the stage table's arrow-key stages, the middle of
// a long list elided so that the `?` overlay's line fits presenter mode's font.
const char* stage_keys() {
  static const std::string text = [] {
    const std::vector<std::string>& names = arrow_key_stages();
    auto join = [&](std::size_t from, std::size_t to) {
      std::string list;
      for (std::size_t i = from; i < to; ++i) list += (i > from ? ", " : "") + names[i];
      return list;
    };
    const std::size_t head = 4, tail = 3;
    return "the stage shown: " + (names.size() <= head + tail + 1
                                      ? join(0, names.size())
                                      : join(0, head) + " ... " + join(names.size() - tail, names.size()));
  }();
  return text.c_str();
}

const std::vector<ViewInfo> kViews = {
    {ViewTab::pipeline, "Pipeline", "pipeline", ViewReads::result, "the stage shown below the graph",
     "the head"},
    {ViewTab::reshape, "Reshape", "reshape", ViewReads::result, "the reshape step", "the head"},
    {ViewTab::heads, "Heads", "heads", ViewReads::result, stage_keys(), "the head selected"},
    {ViewTab::overview, "Overview", "overview", ViewReads::every_weight, stage_keys(), "the head selected"},
    {ViewTab::token_lines, "Token lines", "token_lines", ViewReads::every_weight, nullptr,
     "the head selected"},
    {ViewTab::mask, "Mask", "mask", ViewReads::result, nullptr, "the head (a per-head mask)"},
    {ViewTab::compare, "Compare", "compare", ViewReads::every_weight, stage_keys(), "the head"},
    {ViewTab::complexity, "Complexity", "complexity", ViewReads::result, nullptr, nullptr},
    {ViewTab::large_l, "Large L", "large_l", ViewReads::own, nullptr, nullptr},
    {ViewTab::attention_file, "Attention file", "attention_file", ViewReads::own, nullptr, nullptr},
    {ViewTab::check, "Check", "check", ViewReads::own, nullptr, nullptr},
    {ViewTab::sqrt_dk, "\xE2\x88\x9A" "d_k", "sqrt_dk", ViewReads::own, nullptr, nullptr},
};

std::string folded(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' && c != '_' && c != '-') out += char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const std::vector<ViewInfo>& views() {
  return kViews;
}

const ViewInfo& view_info(ViewTab id) {
  for (const ViewInfo& v : kViews)
    if (v.id == id) return v;
  return kViews.front();
}

const ViewInfo* find_view(const std::string& name) {
  const std::string want = folded(name);
  if (want.empty()) return nullptr;
  for (const ViewInfo& v : kViews)
    if (folded(v.name) == want || folded(v.file_name) == want) return &v;
  return nullptr;
}

std::string view_names() {
  std::string out;
  for (const ViewInfo& v : kViews) out += std::string(out.empty() ? "" : ", ") + v.name;
  return out;
}

const char* to_string(ViewTab t) {
  return view_info(t).file_name;
}

}  // namespace mha::studio
