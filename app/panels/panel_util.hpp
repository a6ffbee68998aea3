// Helpers shared by the panels that show per-head stages (Heads, Compare): the stage list, cache
// keys, and small layout helpers for fonts that grow in presenter mode.
#pragma once

#include <imgui.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "heatmap.hpp"
#include "mha.hpp"
#include "model/roles.hpp"
#include "stage_computer.hpp"
#include "stage_table.hpp"
#include "studio_names.hpp"
#include "textures.hpp"

namespace mha::app::panel {

// The panel struct `p` points to, made on first use.
template <class T>
T& made(std::shared_ptr<T>& p) {
  if (!p) p = std::make_shared<T>();
  return *p;
}

// "0", "1", …, "n-1" (the context stage's feature columns), made again only when n changes.
inline const std::vector<std::string>& numbered(std::vector<std::string>& labels, int n) {
  if (int(labels.size()) != n) {
    labels.clear();
    for (int i = 0; i < n; ++i) labels.push_back(std::to_string(i));
  }
  return labels;
}

// Whether each result holds the stages `names` to draw. Stages a forward left out are computed off
// the UI thread when they are large (studio::StageComputer); meanwhile the panel says what is being
// computed, and the frame does not wait for it.
inline bool stages_ready(studio::StageComputer& stages,
                         std::initializer_list<std::shared_ptr<const ForwardResult<float>>> results,
                         const std::vector<std::string>& names) {
  bool ready = true;
  for (const std::shared_ptr<const ForwardResult<float>>& r : results)
    ready = stages.ready(r, names) && ready;
  if (ready) return true;
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  ImGui::TextWrapped("Computing %s for this view...", list.c_str());
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped(
      "At these sizes the result keeps no (N, H, L, S) stage; this one is computed once, beside the "
      "window, which stays live meanwhile.");
  ImGui::PopStyleColor();
  return false;
}

struct StageChoice {
  const char* name;   // trace name
  const char* label;  // combo text (ASCII: the font may lack maths glyphs)
};
// The per-head stages, in the order the forward makes them: the stage table's head_stages(). The
// pick is ViewState::stage.
inline const std::vector<StageChoice> kStages = [] {
  std::vector<StageChoice> out;
  for (const StageInfo* s : head_stages()) out.push_back({s->name, s->head_label});
  return out;
}();
inline const int kStageCount = int(kStages.size());

// The index of a per-head stage in kStages; -1 for another.
inline int choice_index(const std::string& name) {
  for (int i = 0; i < kStageCount; ++i)
    if (name == kStages[std::size_t(i)].name) return i;
  return -1;
}
inline const int kMasked = choice_index(stage_name::scores_masked),
                 kWeights = choice_index(stage_name::attn_weights),
                 kContext = choice_index(stage_name::context);

// The view may name a stage another panel chose; anything that is not a per-head (L, S) or (L, d_k)
// stage shows the weights.
inline int stage_index(const std::string& name) {
  const int i = choice_index(name);
  return i >= 0 ? i : kWeights;
}

// Grouped-query attention: the colour of key/value head g of G, which every query head reading it
// shares in the Heads, Overview and Pipeline titles. Hues spread round the wheel; light on the dark
// theme and dark on the presenter's light one, so that they read as text on either.
inline ImVec4 kv_group_colour(std::int64_t g, std::int64_t G) {
  const ImVec4 bg = ImGui::GetStyleColorVec4(ImGuiCol_WindowBg);
  const bool light = bg.x + bg.y + bg.z > 1.5f;
  float r, gr, b;
  ImGui::ColorConvertHSVtoRGB(float(g) / float(std::max<std::int64_t>(G, 1)) + 0.08f, light ? 0.9f : 0.55f,
                              light ? 0.62f : 1.0f, r, gr, b);
  return ImVec4(r, gr, b, 1.0f);
}

// ViewState::head_order: the Heads view's order of heads with a model, best score first.
inline constexpr const char* kHeadOrderNames =
    "index\0prev-token\0induction\0first-token\0duplicate\0focus (low entropy)\0";
inline double head_order_score(const HeadRole& r, int order) {
  switch (order) {
    case 1: return r.prev_token;
    case 2: return r.induction;
    case 3: return r.first_token;
    case 4: return r.duplicate_token;
    case 5: return -r.entropy;
    default: return 0;
  }
}

// A colorbar whose tick labels stay within `height` from the cursor down: draw_colorbar centres its
// end labels on the bar's ends, so the bar is inset by half a text line at each end.
inline void colorbar_within(Textures& tex, Colormap c, float vmin, float vmax, float height) {
  const float half = ImGui::GetTextLineHeight() * 0.5f;
  ImGui::BeginGroup();
  ImGui::Dummy(ImVec2(0, std::max(0.0f, half - ImGui::GetStyle().ItemSpacing.y)));
  draw_colorbar(tex, c, vmin, vmax, std::max(height - 2 * half, half * 2));
  ImGui::EndGroup();
}

// (x0, y0, x1, y1) of a rectangle, and of the current window's part on screen (views' info for tests).
inline ImVec4 rect(ImVec2 a, ImVec2 b) {
  return ImVec4(a.x, a.y, b.x, b.y);
}
inline ImVec4 window_rect() {
  const ImVec2 p = ImGui::GetWindowPos(), s = ImGui::GetWindowSize();
  return ImVec4(p.x, p.y, p.x + s.x, p.y + s.y);
}

// The keys an edit of the mask blocks, whose labels a heatmap draws whatever the room: key j when the
// merged mask (N, H, L, S') blocks it for some query i >= j of batch item n, which a causal mask
// never does (padded keys are blocked so too). A causal mask or none marks nothing; more than `most`
// keys are a pattern (a sliding window, random cells), not an edit: none then either.
inline std::vector<int> edited_keys(const Stage<float>& mask, int n, int most = 8) {
  std::vector<int> keys;
  if (mask.shape.size() != 4 || !mask.storage) return keys;
  const std::int64_t H = mask.shape[1], L = mask.shape[2], S = mask.shape[3];
  const float* base = mask.storage->data() + mask.offset + std::int64_t(n) * mask.strides[0];
  const std::int64_t heads = mask.strides[1] == 0 ? 1 : H;  // a mask shared by the heads: once
  for (std::int64_t j = 0; j < S; ++j) {
    bool blocked = false;
    for (std::int64_t h = 0; h < heads && !blocked; ++h)
      for (std::int64_t i = j; i < L && !blocked; ++i) {
        const float v = base[h * mask.strides[1] + i * mask.strides[2] + j * mask.strides[3]];
        blocked = std::isinf(v) && v < 0;
      }
    if (blocked) keys.push_back(int(j));
    if (int(keys.size()) > most) return {};
  }
  return keys;
}

// FNV-1a over the parts: texture versions and cache keys.
inline std::uint64_t mix(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t v = 1469598103934665603ull;
  for (std::uint64_t p : parts) v = (v ^ p) * 1099511628211ull;
  return v;
}

inline bool neg_inf(float v) {
  return std::isinf(v) && v < 0;
}

// True when `seen` was taken from `p` itself (a raw address could be reused after a free).
inline bool same_owner(const std::weak_ptr<const ForwardResult<float>>& seen,
                       const std::shared_ptr<const ForwardResult<float>>& p) {
  return !seen.owner_before(p) && !p.owner_before(seen);
}

// The width of a widget `w` wide with its label to the right.
inline float labelled(const char* label, float w) {
  return w + ImGui::GetStyle().ItemInnerSpacing.x + ImGui::CalcTextSize(label).x;
}

// Puts the next widget on this line when `w` pixels still fit, else on a new one (presenter fonts).
inline void same_line_if_fits(float w) {
  ImGui::SameLine();
  if (ImGui::GetContentRegionAvail().x < w) ImGui::NewLine();
}

// Under this many text lines of height a view is short (a presenter font beside the lesson panel):
// it folds its long lines into one each and gives the rest of the height to its grid or plot.
inline constexpr float kCompactLines = 24;
inline bool compact_view() {
  return ImGui::GetContentRegionAvail().y < ImGui::GetFontSize() * kCompactLines;
}

// `text` cut short at a word (else a letter) with "…" to fit `width` pixels; whole when it fits.
inline std::string fit_line(const std::string& text, float width) {
  if (ImGui::CalcTextSize(text.c_str()).x <= width) return text;
  const std::string ellipsis = "\xE2\x80\xA6";
  std::string cut = text;
  while (!cut.empty()) {
    const std::size_t space = cut.find_last_of(' ');
    if (space != std::string::npos && space > 0) {
      cut.resize(space);
    } else {  // one word left: a letter at a time (a UTF-8 sequence whole)
      std::size_t end = cut.size() - 1;
      while (end > 0 && (static_cast<unsigned char>(cut[end]) & 0xC0) == 0x80) --end;
      cut.resize(end);
    }
    if (ImGui::CalcTextSize((cut + ellipsis).c_str()).x <= width) return cut + ellipsis;
  }
  return ellipsis;
}

// The whole text on hover, wrapped at 30 font sizes.
inline void text_tooltip(const std::string& text) {
  ImGui::BeginTooltip();
  ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopTextWrapPos();
  ImGui::EndTooltip();
}

// `text` on one line, cut short to `width` (<= 0: to the edge of the content region), the whole
// text on hover when it was cut. Returns whether it was.
inline bool folded_text(const std::string& text, float width = 0) {
  if (width <= 0) width = ImGui::GetContentRegionAvail().x;
  const std::string shown = fit_line(text, width);
  ImGui::TextUnformatted(shown.c_str());
  const bool cut = shown != text;
  if (cut && ImGui::IsItemHovered()) text_tooltip(text);
  return cut;
}

// A long line in a view: wrapped at the content region's edge, or in a short view (`fold`) one line
// cut short, the whole text on hover. `disabled`: in the dimmed text colour.
inline void long_text(const std::string& text, bool fold, bool disabled = false) {
  if (disabled) ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  if (fold) {
    folded_text(text);
  } else {
    ImGui::PushTextWrapPos(0);
    ImGui::TextUnformatted(text.c_str());
    ImGui::PopTextWrapPos();
  }
  if (disabled) ImGui::PopStyleColor();
}

}  // namespace mha::app::panel
