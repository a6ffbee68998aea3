// The Heads view: every head of one stage (raw, scaled or masked scores, weights, or context) for one
// batch item as a grid of heatmaps plus the head average, on one colour range shared by all heads so
// they compare at a glance. Under each weights map: its mean row entropy and a row-sum check.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../lessons.hpp"
#include "colour_range.hpp"
#include "export_dialog.hpp"
#include "heatmap.hpp"
#include "model/rope.hpp"
#include "panel_util.hpp"
#include "panels.hpp"
#include "row_check.hpp"

namespace mha::app {

namespace {

using namespace panel;
using namespace heads;

Plane head_plane(const Stage<float>& s, int n, int h) {  // (N, H, R, C) at [n, h]
  return {s.storage->data() + s.offset + n * s.strides[0] + h * s.strides[1], s.strides[2], s.strides[3],
          int(s.shape[2]), int(s.shape[3])};
}

Plane item_plane(const Stage<float>& s, int n) {  // (N, R, C) at [n]
  return {s.storage->data() + s.offset + n * s.strides[0], s.strides[1], s.strides[2], int(s.shape[1]),
          int(s.shape[2])};
}

// A weights row-check: softmax rows must sum to 1; a row whose every key is blocked is NaN (torch) or
// all 0 (the notebook's policy) and is counted apart so it does not read as a numerical error.
struct RowCheck {
  double entropy = 0;      // mean over ordinary rows, bits
  double entropy_max = 0;  // the same for uniform weights over each row's visible keys
  double max_err = 0;      // max |row sum - 1| over ordinary rows
  int nan_rows = 0, zero_rows = 0;
};

RowCheck sum_rows(const RowPart* rows, int n) {
  RowCheck c;
  int ordinary = 0;
  for (int i = 0; i < n; ++i) {
    const RowPart& r = rows[i];
    if (r.kind == RowPart::nan) {
      ++c.nan_rows;
    } else if (r.kind == RowPart::zero) {
      ++c.zero_rows;
    } else {
      ++ordinary;
      c.entropy += r.ent;
      c.entropy_max += r.ent_max;
      c.max_err = std::max(c.max_err, r.err);
    }
  }
  if (ordinary > 0) {
    c.entropy /= ordinary;
    c.entropy_max /= ordinary;
  }
  return c;
}

// The head average's row check. The average has no mask of its own, but a key blocked for the row
// in every head has weight 0 in it too: its maximum counts the keys some head may see (log2 S would
// put a causal row's uniform spread far below the maximum).
RowPart average_row(const Plane& avg, const Stage<float>* mask, int b, int H, int i) {
  RowPart r = check_row(avg, nullptr, i);
  if (!mask) return r;
  const int heads = mask->strides[1] == 0 ? 1 : H;  // a mask shared by the heads: once
  int visible = 0;
  for (int j = 0; j < avg.cols; ++j) {
    bool seen = false;
    for (int h = 0; h < heads && !seen; ++h) seen = !neg_inf(head_plane(*mask, b, h).at(i, j));
    visible += seen ? 1 : 0;
  }
  r.ent_max = std::log2(double(std::max(visible, 1)));
  return r;
}

std::uint64_t float_bits(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Whether row i holds the same bits in both planes (of two results: the new one may share or copy
// the old one's storage, or differ anywhere).
bool same_row(const Plane& a, const Plane& b, int i) {
  if (a.rows != b.rows || a.cols != b.cols || a.cs != b.cs) return false;
  const float* x = a.p + std::int64_t(i) * a.rs;
  const float* y = b.p + std::int64_t(i) * b.rs;
  if (x == y) return true;
  if (a.cs == 1) return std::memcmp(x, y, std::size_t(a.cols) * sizeof(float)) == 0;
  for (int j = 0; j < a.cols; ++j)
    if (std::memcmp(x + std::int64_t(j) * a.cs, y + std::int64_t(j) * b.cs, sizeof(float)) != 0) return false;
  return true;
}

struct Range {
  float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity(), maxabs = 0;
  // std::min / std::max keep the first of equal values (-0 and 0), so folding rows in order gives
  // what folding their values in the same order gives.
  void fold(const Range& r) {
    lo = std::min(lo, r.lo);
    hi = std::max(hi, r.hi);
    maxabs = std::max(maxabs, r.maxabs);
  }
};

// What one (result, stage, batch item) needs beyond the trace itself; rebuilt only when one of those
// changes, since each piece costs a pass over H·L·S values. Kept per row, and a new result of the
// same sizes redoes only the rows that differ from the last one's (a mask edit changes a few).
struct HeadsCache {
  std::weak_ptr<const ForwardResult<float>> source;
  int stage = -1, batch = -1;
  int H = 0, R = 0, C = 0;
  bool masked = false;
  float lo = 0, hi = 0, maxabs = 0;       // finite values of every head of this item
  std::vector<float> mean;                // rows × cols head mean (attn_weights: the trace has it)
  std::vector<std::uint8_t> avg_blocked;  // rows × cols: blocked in every head (weights, masked)
  std::vector<RowCheck> checks;           // attn_weights per head, then the average
  std::int64_t masked_rows = 0;           // fully masked (h, i) rows of this batch item
  std::vector<Range> row_range;           // (H, R): each head row's finite values
  std::vector<RowPart> row_parts;         // (H + 1, R): each weights row's check, then the average's
  bool nan_rows = false;                  // some weights row of this item is NaN
  // Row checks wait until their map is on screen (ensure_checks): masked_rows then comes from the
  // mask (rows blocked at every key) and nan_rows from the output (a NaN weights row makes a NaN
  // output row). due[h]: head h's (H: the average's) checks are not done; due_rows (H + 1, R): the
  // rows still to check.
  std::vector<char> due, due_rows;
};

// pass(0) and pass(1), the two halves of a job over `cells` values: on two threads from 2^20 cells
// (at L = 2048 a pass is most of a second on one core), else one after the other.
void both_halves(double cells, const std::function<void(int)>& pass) {
  if (cells >= 1 << 20) {
    std::thread second(pass, 1);
    pass(0);
    second.join();
  } else {
    pass(0);
    pass(1);
  }
}

// all_checks: every head's row checks now (else those that are due wait for ensure_checks).
// `changed`: null, or the result's own word on which (N·L) query rows may differ from `since`
// (studio::Result::rows_changed); when the cache was built from `since`, the other rows are kept
// without comparing them.
void rebuild(HeadsCache& c, const std::shared_ptr<const ForwardResult<float>>& source, int si, int b,
             bool all_checks, const std::vector<char>* changed = nullptr,
             const std::shared_ptr<const ForwardResult<float>>& since = nullptr) {
  const ForwardResult<float>& f = *source;
  const Trace<float>& t = f.trace;
  const Stage<float>& s = *find_stage(f, kStages[si].name);
  const Stage<float>& w = *find_stage(f, "attn_weights");
  const Stage<float>& avg = *find_stage(f, "attn_weights_avg");
  const Stage<float>* mask = t.find("attn_mask");
  const int H = int(f.dims.H), R = int(s.shape[2]), C = int(s.shape[3]);
  // The last result this cache was built from, if it is still held (as the Compare view's "before"):
  // rows whose values are the same bits in both keep what was computed for them.
  const std::shared_ptr<const ForwardResult<float>> old = c.source.lock();
  const ForwardResult<float>* o = old && old != source && c.stage == si && c.batch == b && c.H == H &&
                                          c.R == R && c.C == C && c.masked == (mask != nullptr) &&
                                          c.row_range.size() == std::size_t(H) * std::size_t(R) &&
                                          c.row_parts.size() == std::size_t(H + 1) * std::size_t(R)
                                      ? old.get()
                                      : nullptr;
  // The old result's stages as it holds them: nothing is computed for a comparison.
  const Stage<float>* os = o ? find_stage(*o, kStages[si].name, false) : nullptr;
  const Stage<float>* ow = o ? find_stage(*o, "attn_weights", false) : nullptr;
  const Stage<float>* oavg = o ? find_stage(*o, "attn_weights_avg", false) : nullptr;
  const Stage<float>* omask = o ? o->trace.find("attn_mask") : nullptr;
  if (!os || !ow || !oavg || (mask && !omask)) o = nullptr;
  const char* hint = o && changed && since == old && changed->size() == std::size_t(f.dims.N) * std::size_t(R)
                         ? changed->data() + std::size_t(b) * std::size_t(R)
                         : nullptr;
  c.source = source;
  c.stage = si;
  c.batch = b;
  c.H = H, c.R = R, c.C = C;
  c.masked = mask != nullptr;

  // Two threads over H·L·S values (at L = 2048 that is most of a second on one core; the worker is
  // idle once its result is here). Rows are split for the range, mean and blocked passes, so every
  // cell still sums its heads in head order; heads are split for the row checks. The results are
  // those of one thread, bit for bit, and the same whether a row was redone or kept.
  const bool want_mean = si != kWeights;
  const bool want_blocked = si == kWeights && mask;
  if (!o) {
    c.mean.assign(want_mean ? std::size_t(R) * std::size_t(C) : 0, 0.0f);
    c.avg_blocked.assign(want_blocked ? std::size_t(R) * std::size_t(C) : 0, 1);
    c.row_range.assign(std::size_t(H) * std::size_t(R), Range{});
    c.row_parts.assign(std::size_t(H + 1) * std::size_t(R), RowPart{});
  }
  Range part[2];
  c.checks.assign(std::size_t(H) + 1, RowCheck{});
  // Which rows to redo: (H, R) flags for the stage shown and for the weights' checks (weights or
  // mask row changed), R for the average's checks. All true without an earlier result.
  const std::size_t HR = std::size_t(H) * std::size_t(R);
  std::vector<char> s_redo(HR, 1), w_redo(HR, 1), avg_redo(std::size_t(R), 1);
  auto rows_pass = [&](int k) {
    const int r0 = R * k / 2, r1 = R * (k + 1) / 2;
    for (int i = r0; i < r1; ++i) {
      bool any = !o, any_mask = !o;
      if (o && hint && !hint[i]) {  // the same bits in every stage: nothing to redo
        for (int h = 0; h < H; ++h) {
          const std::size_t at = std::size_t(h) * std::size_t(R) + std::size_t(i);
          s_redo[at] = w_redo[at] = 0;
        }
        avg_redo[std::size_t(i)] = 0;
      } else if (o) {
        bool mask_changed = false;
        for (int h = 0; h < H; ++h) {
          const std::size_t at = std::size_t(h) * std::size_t(R) + std::size_t(i);
          const bool sc = !same_row(head_plane(s, b, h), head_plane(*os, b, h), i);
          const bool wc = &s == &w ? sc : !same_row(head_plane(w, b, h), head_plane(*ow, b, h), i);
          // A mask shared by the heads (stride 0) is compared once.
          if (mask && (h == 0 || mask->strides[1] != 0 || omask->strides[1] != 0))
            mask_changed = !same_row(head_plane(*mask, b, h), head_plane(*omask, b, h), i);
          s_redo[at] = sc;
          w_redo[at] = wc || mask_changed;
          any = any || sc;
          any_mask = any_mask || mask_changed;
        }
        // The average's check counts the keys the mask lets a row see: redone when either changes.
        avg_redo[std::size_t(i)] = !same_row(item_plane(avg, b), item_plane(*oavg, b), i) || any_mask;
      }
      for (int h = 0; h < H; ++h) {
        if (!s_redo[std::size_t(h) * std::size_t(R) + std::size_t(i)]) continue;
        const Plane p = head_plane(s, b, h);
        Range g;
        if (p.cs == 1) {  // a finite row (the usual case) in vectorised passes: its sum is finite
          const Eigen::Map<const Eigen::ArrayXf> row(p.p + std::int64_t(i) * p.rs, C);
          if (std::isfinite(row.sum())) {
            g.lo = row.minCoeff();
            g.hi = row.maxCoeff();
            g.maxabs = std::max(std::fabs(g.lo), std::fabs(g.hi));
            c.row_range[std::size_t(h) * std::size_t(R) + std::size_t(i)] = g;
            continue;
          }
        }
        for (int j = 0; j < C; ++j) {
          const float v = p.at(i, j);
          if (std::isfinite(v)) {
            g.lo = std::min(g.lo, v);
            g.hi = std::max(g.hi, v);
            g.maxabs = std::max(g.maxabs, std::fabs(v));
          }
        }
        c.row_range[std::size_t(h) * std::size_t(R) + std::size_t(i)] = g;
      }
      float* m = want_mean ? c.mean.data() + std::size_t(i) * std::size_t(C) : nullptr;
      if (m && any) {  // every cell sums its heads in head order, from 0
        std::fill(m, m + C, 0.0f);
        for (int h = 0; h < H; ++h) {
          const Plane p = head_plane(s, b, h);
          for (int j = 0; j < C; ++j) m[j] += p.at(i, j);
        }
        for (int j = 0; j < C; ++j) m[j] /= float(H);
      }
      // The average of the weights is blocked only where every head is (per-head masks differ).
      if (want_blocked && any_mask) {
        std::uint8_t* bl = c.avg_blocked.data() + std::size_t(i) * std::size_t(C);
        std::fill(bl, bl + C, std::uint8_t(1));
        const int mask_heads = mask->strides[1] == 0 ? 1 : H;  // a mask shared by the heads: once
        for (int h = 0; h < mask_heads; ++h) {
          const Plane mp = head_plane(*mask, b, h);
          for (int j = 0; j < C; ++j)
            if (!neg_inf(mp.at(i, j))) bl[j] = 0;
        }
      }
    }
    for (int h = 0; h < H; ++h)
      for (int i = r0; i < r1; ++i)
        part[k].fold(c.row_range[std::size_t(h) * std::size_t(R) + std::size_t(i)]);
  };
  // Row checks always come from the weights: the fully-masked count matters for every stage.
  // Heads (and, last, the average) alternate between the two threads.
  auto checks_pass = [&](int k) {
    for (int h = k; h <= H; h += 2) {
      RowPart* rows = c.row_parts.data() + std::size_t(h) * std::size_t(R);
      if (h == H) {
        const Plane p = item_plane(avg, b);
        for (int i = 0; i < R; ++i)
          if (avg_redo[std::size_t(i)]) rows[i] = average_row(p, mask, b, H, i);
      } else {
        const Plane p = head_plane(w, b, h);
        const Plane m = mask ? head_plane(*mask, b, h) : Plane{};
        for (int i = 0; i < R; ++i)
          if (w_redo[std::size_t(h) * std::size_t(R) + std::size_t(i)])
            rows[i] = check_row(p, mask ? &m : nullptr, i);
      }
      c.checks[std::size_t(h)] = sum_rows(rows, R);
    }
  };
  auto run = [&](const std::function<void(int)>& pass) { both_halves(double(H) * R * C, pass); };
  run(rows_pass);
  // Rows still due from the result before are due now too (their row_parts are older than that).
  const std::size_t HR1 = std::size_t(H + 1) * std::size_t(R);
  if (o && c.due_rows.size() == HR1)
    for (std::size_t x = 0; x < HR1; ++x)
      if (c.due_rows[x]) (x < HR ? w_redo[x] : avg_redo[x - HR]) = 1;
  c.due.assign(std::size_t(H) + 1, 0);
  c.due_rows.assign(HR1, 0);
  if (all_checks) {
    run(checks_pass);
  } else {
    for (int h = 0; h <= H; ++h) {
      const char* redo = h == H ? avg_redo.data() : w_redo.data() + std::size_t(h) * std::size_t(R);
      std::copy(redo, redo + R, c.due_rows.begin() + std::ptrdiff_t(std::size_t(h) * std::size_t(R)));
      c.due[std::size_t(h)] = std::any_of(redo, redo + R, [](char x) { return x != 0; });
      if (!c.due[std::size_t(h)])  // every row as before: the sum of the kept parts
        c.checks[std::size_t(h)] = sum_rows(c.row_parts.data() + std::size_t(h) * std::size_t(R), R);
    }
  }
  Range all = part[0];
  all.fold(part[1]);
  float lo = all.lo, hi = all.hi;
  if (lo > hi) lo = hi = 0;
  c.lo = lo;
  c.hi = hi;
  c.maxabs = all.maxabs;
  c.masked_rows = 0;
  c.nan_rows = false;
  if (all_checks) {
    for (int h = 0; h < H; ++h) {
      c.masked_rows += c.checks[std::size_t(h)].nan_rows + c.checks[std::size_t(h)].zero_rows;
      c.nan_rows = c.nan_rows || c.checks[std::size_t(h)].nan_rows > 0;
    }
    return;
  }
  if (mask && f.fully_masked_rows > 0) {  // rows of this item blocked at every key, head by head
    const int mask_heads = mask->strides[1] == 0 ? 1 : H;  // a mask shared by the heads: once
    for (int h = 0; h < mask_heads; ++h) {
      const Plane m = head_plane(*mask, b, h);
      for (int i = 0; i < R; ++i) {
        int j = 0;
        while (j < C && neg_inf(m.at(i, j))) ++j;
        if (j == C) c.masked_rows += mask_heads == 1 ? H : 1;
      }
    }
  }
  const Stage<float>& out = f.trace["output"];  // (N, L, E)
  const Plane o_plane = item_plane(out, b);
  for (int i = 0; i < o_plane.rows && !c.nan_rows; ++i)
    for (int j = 0; j < o_plane.cols; ++j)
      if (std::isnan(o_plane.at(i, j))) {
        c.nan_rows = true;
        break;
      }
}

// Head h's (H: the average's) row checks, if they are due: its map is on screen.
void ensure_checks(HeadsCache& c, int h) {
  if (std::size_t(h) >= c.due.size() || !c.due[std::size_t(h)]) return;
  const std::shared_ptr<const ForwardResult<float>> source = c.source.lock();
  if (!source) return;
  const ForwardResult<float>& f = *source;
  const int R = c.R, b = c.batch;
  const Stage<float>* mask = f.trace.find("attn_mask");
  const Plane p = h == c.H ? item_plane(*find_stage(f, "attn_weights_avg"), b)
                           : head_plane(*find_stage(f, "attn_weights"), b, h);
  const Plane m = mask && h < c.H ? head_plane(*mask, b, h) : Plane{};
  RowPart* rows = c.row_parts.data() + std::size_t(h) * std::size_t(R);
  char* due = c.due_rows.data() + std::size_t(h) * std::size_t(R);
  auto part = [&](int k) {  // rows split in two halves; each row's check depends on that row alone
    for (int i = R * k / 2; i < R * (k + 1) / 2; ++i)
      if (due[i]) rows[i] = h == c.H ? average_row(p, mask, b, c.H, i) : check_row(p, mask ? &m : nullptr, i);
  };
  both_halves(double(R) * c.C, part);
  std::fill(due, due + R, 0);
  c.checks[std::size_t(h)] = sum_rows(rows, R);
  c.due[std::size_t(h)] = 0;
}

// MHA_VERIFY_HEADS set (tests; the latency replay when checked): each rebuild is compared with one
// from scratch, field by field and bit for bit, and a difference aborts naming the field.
void verify_rebuild(HeadsCache& c, const std::shared_ptr<const ForwardResult<float>>& source, int si, int b) {
  for (int h = 0; h <= c.H; ++h) ensure_checks(c, h);
  HeadsCache full;
  rebuild(full, source, si, b, true);
  // memcmp of an empty vector's null data() is undefined (UBSan): compare nothing instead.
  auto bits = [](const void* x, const void* y, std::size_t n) { return n == 0 || std::memcmp(x, y, n) == 0; };
  const char* bad = nullptr;
  if (!bits(&c.lo, &full.lo, 4) || !bits(&c.hi, &full.hi, 4) || !bits(&c.maxabs, &full.maxabs, 4))
    bad = "range";
  else if (c.mean.size() != full.mean.size() || !bits(c.mean.data(), full.mean.data(), 4 * c.mean.size()))
    bad = "mean";
  else if (c.avg_blocked != full.avg_blocked)
    bad = "avg_blocked";
  else if (c.masked_rows != full.masked_rows || c.checks.size() != full.checks.size())
    bad = "masked_rows";
  else if (c.nan_rows != full.nan_rows)
    bad = "nan_rows";
  for (std::size_t h = 0; !bad && h < c.checks.size(); ++h) {
    const RowCheck &x = c.checks[h], &y = full.checks[h];
    if (!bits(&x.entropy, &y.entropy, 8) || !bits(&x.entropy_max, &y.entropy_max, 8) ||
        !bits(&x.max_err, &y.max_err, 8) || x.nan_rows != y.nan_rows || x.zero_rows != y.zero_rows)
      bad = "checks";
  }
  if (bad) {
    std::fprintf(stderr, "mha-studio: MHA_VERIFY_HEADS: the Heads view's %s differs from a full rebuild\n",
                 bad);
    std::abort();
  }
}

// A compact weights map's one check line, at its widest.
constexpr const char* kCheckLineShort = "H 0.00/0.00 bits";

using panel::fit_line;
using panel::kCompactLines;

// The label that is widest on screen of the first n (none: "").
std::string widest_label(const std::vector<std::string>* labels, int n) {
  std::string widest;
  float w = -1;
  for (int i = 0; labels && i < n && i < int(labels->size()); ++i)
    if (const float x = ImGui::CalcTextSize((*labels)[std::size_t(i)].c_str()).x; x > w)
      w = x, widest = (*labels)[std::size_t(i)];
  return widest;
}

// The stage's formula and its note. Compact: one line (the shape, the name and the formula as far
// as it fits) that opens to the whole formula and the note, both on hover too.
void stage_formula(const std::string& head, const std::string& formula, const std::string& note,
                   bool compact) {
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  if (!compact) {
    ImGui::TextWrapped("%s = %s", head.c_str(), formula.c_str());
    ImGui::TextWrapped("%s", note.c_str());
    ImGui::PopStyleColor();
    return;
  }
  const std::string line = head + " = " + formula;
  const bool was_open = ImGui::GetStateStorage()->GetBool(ImGui::GetID("formula"), false);
  const float arrow = ImGui::GetTreeNodeToLabelSpacing();
  // The line ends where the colorbar's column starts (its top label stands above the grid).
  const float room = ImGui::GetContentRegionAvail().x - arrow - ImGui::GetFontSize() * 5.0f;
  const std::string label = was_open ? head : fit_line(line, room);
  const bool open = ImGui::TreeNodeEx("formula", ImGuiTreeNodeFlags_NoTreePushOnOpen, "%s", label.c_str());
  if (ImGui::IsItemHovered() && !open) {
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
    ImGui::SetTooltip("%s\n%s", line.c_str(), note.c_str());
    ImGui::PopTextWrapPos();
  }
  if (open) {
    ImGui::TextWrapped("= %s", formula.c_str());
    ImGui::TextWrapped("%s", note.c_str());
  }
  ImGui::PopStyleColor();
}

// The heatmap widget's margins for one lane of whole labels (heatmap.cpp): how large a map will be
// about, so the grid can pick its column count before fit_heatmap says exactly.
struct LabelSpace {
  float row_w = 0, col_w = 0;
};

LabelSpace label_space(const std::vector<std::string>* rows, int nrows, const std::vector<std::string>* cols,
                       int ncols) {
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  LabelSpace l;
  for (int i = 0; rows && i < nrows && i < int(rows->size()); ++i)
    l.row_w = std::max(l.row_w, ImGui::CalcTextSize((*rows)[std::size_t(i)].c_str()).x);
  for (int j = 0; cols && j < ncols && j < int(cols->size()); ++j)
    l.col_w = std::max(l.col_w, ImGui::CalcTextSize((*cols)[std::size_t(j)].c_str()).x);
  l.row_w = std::min(l.row_w, font * 8) + style.ItemSpacing.x;
  l.col_w = std::min(l.col_w, font * 8) + style.ItemSpacing.y;
  return l;
}

// The cell size of a map `w` wide, before any height limit.
float cell_for_width(const LabelSpace& l, float w, int cols, float max_cell) {
  return std::max(1.0f, std::min(max_cell, (w - l.row_w - ImGui::GetFontSize() * 1.5f) / float(cols)));
}

// The height a map with this cell size needs. The widget subtracts col_w from the height it is given
// whatever the label direction, so that much is always reserved.
float map_height(const LabelSpace& l, float cell, int rows) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const bool vertical = l.col_w - style.ItemSpacing.y > cell;
  const float top = vertical ? l.col_w : ImGui::GetFontSize() + style.ItemSpacing.y;
  return std::max(top, l.col_w) + cell * float(rows) + 1.0f;
}

// The lines under the grid: what hatched cells and NaN rows mean, fully masked rows, GQA's sharing.
std::vector<std::string> footer_lines(const ForwardResult<float>& f, bool blocks, bool nan_rows,
                                      std::int64_t masked_rows) {
  const Dims& d = f.dims;
  const int H = int(d.H);
  std::vector<std::string> footer;
  if (blocks || nan_rows)
    footer.push_back(std::string(blocks ? "Grey hatched cells: blocked by the mask (not low values). " : "") +
                     (!nan_rows ? ""
                      : f.nonfinite_inputs > 0
                          ? "Rows flagged NaN: a query with no visible key, or NaN/Inf inputs."
                          : "Rows flagged NaN: a query with no visible key."));
  if (f.fully_masked_rows > 0) {
    char buf[512];
    if (f.fully_masked == FullyMasked::nan)
      std::snprintf(buf, sizeof buf,
                    "Every key is blocked for %lld (head, query) rows, %lld of them in this batch item: "
                    "softmax of a row of all -inf is 0/0, so torch gives NaN, and the NaN flows into context "
                    "and output. Choose \"fully masked -> 0\" in the controls to get zeros instead.",
                    (long long)f.fully_masked_rows, (long long)masked_rows);
    else
      std::snprintf(buf, sizeof buf,
                    "Every key is blocked for %lld (head, query) rows, %lld of them in this batch item: "
                    "their weights are set to 0 (the course notebook's masked_fill(isnan, 0)); torch "
                    "itself would give NaN there.",
                    (long long)f.fully_masked_rows, (long long)masked_rows);
    footer.push_back(buf);
  }
  if (d.G < d.H) {
    const int per = int(d.H / d.G);
    footer.push_back("Grouped-query attention: " + std::to_string(H) + " query heads share " +
                     std::to_string(d.G) + " key/value heads; heads 0-" + std::to_string(per - 1) +
                     " use kv head 0, and so on (kv head = h / " + std::to_string(per) + ").");
  }
  return footer;
}

// The room the grid of maps may take: what is left beside the colorbar (5 text heights wide) and
// above the footer's lines, wrapped (compact: one line each).
std::pair<float, float> grid_area(const std::vector<std::string>& footer, bool compact) {
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  float footer_h = 0;
  for (const std::string& line : footer)
    footer_h += (compact ? ImGui::GetTextLineHeight()
                         : ImGui::CalcTextSize(line.c_str(), nullptr, false, avail.x).y) +
                style.ItemSpacing.y;
  // Compact, the grid takes what is left down to three text lines (the maps shrink, whole).
  return {std::max(font * 10, avail.x - font * 5.0f - style.ItemSpacing.x),
          std::max(font * (compact ? 3 : 8), avail.y - footer_h)};
}

// What follows the grid of maps: the colorbar beside it, then the footer's lines (compact: one line
// each, cut short, the whole line on hover).
void grid_end(Textures& tex, Colormap cmap, float vmin, float vmax, float grid_h, bool row_scale,
              const std::vector<std::string>& footer, bool compact) {
  const float font = ImGui::GetFontSize();
  ImGui::SameLine();
  ImGui::BeginGroup();
  draw_colorbar(tex, cmap, vmin, vmax, std::clamp(grid_h - font * 2, font * 4, font * 16));
  if (row_scale) ImGui::TextDisabled("x row max");
  ImGui::EndGroup();
  for (const std::string& line : footer) {
    if (!compact) {
      ImGui::TextWrapped("%s", line.c_str());
      continue;
    }
    panel::folded_text(line);
  }
}

// A map's title: the head, its key/value head under GQA or its measured role (on this sentence, else
// the probes'), or the average.
// room: the width it may take (0: the column's), cut short to fit.
void head_title(const Dims& d, const studio::ModelResult* model, int k, bool weights, float room = 0) {
  const int H = int(d.H);
  if (room <= 0) room = ImGui::GetContentRegionAvail().x;
  if (k == H) {
    ImGui::TextUnformatted(fit_line("head average", room).c_str());
    if (weights && ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "attn_weights_avg = attn_weights.sum(dim=1) / num_heads:\nwhat torch returns by "
          "default (average_attn_weights=True)");
    return;
  }
  // Under GQA the title names the key/value head it reads, in that group's colour.
  std::string title = "head " + std::to_string(k);
  if (d.G < d.H) title += " \xC2\xB7 kv " + std::to_string(k / (d.H / d.G));
  const std::string tag = model ? studio::head_role_label(*model, model->layer, k) : "";
  if (!tag.empty()) title += " \xC2\xB7 " + tag;
  const std::string shown = fit_line(title, room);
  if (d.G < d.H)
    ImGui::TextColored(kv_group_colour(k / (d.H / d.G), d.G), "%s", shown.c_str());
  else
    ImGui::TextUnformatted(shown.c_str());
  if (ImGui::IsItemHovered() && (d.G < d.H || !tag.empty() || shown != title)) {
    std::string tip = shown != title ? title : "";
    if (d.G < d.H)
      tip += std::string(tip.empty() ? "" : "\n") + "grouped-query attention: query heads " +
             std::to_string(k / (d.H / d.G) * (d.H / d.G)) + " to " +
             std::to_string((k / (d.H / d.G) + 1) * (d.H / d.G) - 1) + " read key/value head " +
             std::to_string(k / (d.H / d.G)) + " of " + std::to_string(d.G);
    if (!tag.empty()) tip += (tip.empty() ? "" : "\n") + studio::head_role_details(*model, model->layer, k);
    ImGui::SetTooltip("%s", tip.c_str());
  }
}

// The Heads view's "scores without RoPE" choice: ViewState::stage, beside the trace's stages.
constexpr const char* kRopeStage = "scores_without_rope";
constexpr const char* kRopeLabel = "scores without RoPE  (q . k before the rotation)";

// A small line chart of each map's mean score against the distance i - j: with RoPE the score
// depends on distance, without it only on the tokens. ImDrawList lines, axes labelled.
void offset_plot(const std::vector<double>& without, const std::vector<double>& with, ImVec2 size) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const float font = ImGui::GetFontSize(), pad = font * 0.4f;
  const float left = o.x + font * 3.5f, right = o.x + size.x - pad, top = o.y + pad,
              bottom = o.y + size.y - font * 3.8f;
  const std::size_t n = std::min(without.size(), with.size());
  double lo = 0, hi = 0;
  for (std::size_t i = 0; i < n; ++i)
    lo = std::min({lo, without[i], with[i]}), hi = std::max({hi, without[i], with[i]});
  if (hi - lo < 1e-9) hi = lo + 1;
  const ImU32 axis = ImGui::GetColorU32(ImGuiCol_TextDisabled);
  dl->AddLine(ImVec2(left, top), ImVec2(left, bottom), axis);
  dl->AddLine(ImVec2(left, bottom), ImVec2(right, bottom), axis);
  auto y_of = [&](double v) { return bottom - float((v - lo) / (hi - lo)) * (bottom - top); };
  auto x_of = [&](std::size_t i) { return left + (n > 1 ? float(i) / float(n - 1) : 0.0f) * (right - left); };
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g", hi);
  dl->AddText(ImVec2(o.x, top - font * 0.5f), axis, buf);
  std::snprintf(buf, sizeof buf, "%.2g", lo);
  dl->AddText(ImVec2(o.x, bottom - font * 0.5f), axis, buf);
  dl->AddText(ImVec2(left, bottom + 2), axis, "0");
  const std::string far = "distance i - j  " + std::to_string(n > 0 ? n - 1 : 0);
  dl->AddText(ImVec2(right - ImGui::CalcTextSize(far.c_str()).x, bottom + 2), axis, far.c_str());
  const ImU32 c_without = IM_COL32(120, 170, 255, 255), c_with = IM_COL32(255, 160, 60, 255);
  for (std::size_t i = 1; i < n; ++i) {
    dl->AddLine(ImVec2(x_of(i - 1), y_of(without[i - 1])), ImVec2(x_of(i), y_of(without[i])), c_without,
                2.0f);
    dl->AddLine(ImVec2(x_of(i - 1), y_of(with[i - 1])), ImVec2(x_of(i), y_of(with[i])), c_with, 2.0f);
  }
  // The legend under the axis, one entry a line: the plot may be narrower than both side by side.
  dl->AddText(ImVec2(left, bottom + font * 1.3f), c_without, "without RoPE");
  dl->AddText(ImVec2(left, bottom + font * 2.5f), c_with, "with RoPE");
  ImGui::Dummy(size);
}

// One head's scores without and with the rotation, side by side on one colour range, and their
// mean by distance: where a student sees relative position appear. Returns the two maps' events
// (without, with). Compact: the explanation one line (the rest on hover).
std::vector<HeatmapEvent> draw_rope(AppState& state, Textures& tex, bool compact) {
  const studio::ModelResult& m = *state.result.model;
  const ForwardResult<float>& f = *state.result.forward;
  const Tensor<float>& without = *m.scores_without_rope;  // (H, T, T)
  ViewState& view = state.view();
  const int H = int(f.dims.H), R = int(f.dims.L), C = int(without.size(2));
  const int h = std::clamp(view.sel_head, 0, H - 1);
  const Stage<float>* with_stage = find_stage(f, "scores_scaled");
  const Stage<float>* masked = find_stage(f, "scores_masked");
  if (!with_stage || !masked) {
    ImGui::TextWrapped("This result does not hold the scores: pick another stage.");
    return {};
  }
  const float font = ImGui::GetFontSize();
  ImGui::SetNextItemWidth(font * 8);
  int pick = h;
  if (ImGui::SliderInt("head", &pick, 0, H - 1)) view.sel_head = pick;
  ImGui::SameLine();
  ImGui::TextDisabled("reads K/V head %d of %lld", h / std::max(1, H / int(f.dims.G)), (long long)f.dims.G);
  same_line_if_fits(ImGui::CalcTextSize("Export...").x + font);
  export_button(state, rope_request(state, h));
  const char* about =
      "RoPE turns q_i and k_j by i*theta and j*theta, so q_i . k_j depends on i - j. The scores before the "
      "rotation (no position at all), after it (the model's), and their mean by distance.";
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  if (!compact) {
    ImGui::TextWrapped("%s", about);
  } else {
    panel::folded_text(about);
  }
  ImGui::PopStyleColor();

  const Plane pw = head_plane(*with_stage, 0, h), pm = head_plane(*masked, 0, h);
  const float* pn = without.ptr() + std::int64_t(h) * R * C;
  render::ValueRange vr;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j)
      if (!neg_inf(pm.at(i, j))) vr.add(pw.at(i, j)), vr.add(pn[i * C + j]);
  const Colormap cmap = render::stage_colormap("scores", state.window().colormap);
  const render::ColourRange range = render::auto_colour_range(vr, cmap, false);
  // Three columns: the two maps and the distance plot, the maps as tall as the view leaves; where
  // a third of the width is too narrow for the plot (a presenter font beside the lesson), the plot
  // goes under the two maps, and in a short view it is folded (a line that opens it) so the maps
  // keep the height. The maps are whole in the height they get.
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float spacing = ImGui::GetStyle().ItemSpacing.x, title_h = ImGui::GetTextLineHeightWithSpacing();
  const bool stacked = (avail.x - 2 * spacing) / 3 < font * 14;
  const ImGuiID plot_open_id = ImGui::GetID("mean score by distance");
  const bool folded = stacked && compact && !ImGui::GetStateStorage()->GetBool(plot_open_id, false);
  const float col_w = stacked ? (avail.x - spacing) / 2 : (avail.x - 2 * spacing) / 3;
  const float plot_h = !stacked ? 0 : folded ? 0 : std::max(font * 7, avail.y * 0.4f);
  const float col_h = std::max(font * 6, avail.y - title_h - spacing - (stacked ? plot_h + title_h : 0));
  std::vector<float> with_copy(static_cast<std::size_t>(R) * std::size_t(C));
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) with_copy[std::size_t(i * C + j)] = pw.at(i, j);
  const float* planes[2] = {pn, with_copy.data()};
  const char* titles[2] = {"without RoPE", "with RoPE (the model's)"};
  std::vector<HeatmapEvent> events;
  for (int side = 0; side < 2; ++side) {
    if (side) ImGui::SameLine();
    ImGui::BeginGroup();
    ImGui::TextUnformatted(titles[side]);
    Heatmap hm;
    hm.id = std::string("heads/rope/") + std::to_string(side);
    hm.values = planes[side];
    hm.rows = R;
    hm.cols = C;
    hm.row_stride = C;
    hm.vmin = range.vmin;
    hm.vmax = range.vmax;
    hm.colormap = cmap;
    hm.row_labels = &state.result.query_tokens;
    hm.col_labels = &state.result.key_tokens;
    hm.show_values = view.show_values;
    hm.size = ImVec2(col_w, col_h);
    hm.version = mix({state.result.generation, std::uint64_t(h), std::uint64_t(side), std::uint64_t(cmap)});
    hm.blocked = [pm](int i, int j) { return neg_inf(pm.at(i, j)); };
    hm.hover_row = view.hover_query;
    hm.hover_col = view.hover_key;
    const HeatmapEvent ev = draw_heatmap(tex, hm);
    report_hover(ev);
    events.push_back(ev);
    ImGui::EndGroup();
  }
  if (!stacked) ImGui::SameLine();
  ImGui::BeginGroup();
  if (stacked && compact) {
    if (ImGui::TreeNodeEx("mean score by distance", ImGuiTreeNodeFlags_NoTreePushOnOpen))
      offset_plot(mean_score_by_offset(pn, R, C), mean_score_by_offset(with_copy.data(), R, C),
                  ImVec2(avail.x, plot_h));
  } else {
    ImGui::TextUnformatted("mean score by distance");
    offset_plot(mean_score_by_offset(pn, R, C), mean_score_by_offset(with_copy.data(), R, C),
                stacked ? ImVec2(avail.x, plot_h) : ImVec2(col_w, std::min(col_h, col_w)));
  }
  ImGui::EndGroup();
  return events;
}

// With a model: a right-click on a head's title knocks it out or back in (a what-if, one undo step),
// or knocks out every other head of the layer. Returns whether the head is knocked out.
bool knockout_menu(AppState& state, std::int64_t layer, int k) {
  const Scenario& sc = state.scenario();
  if (!sc.has_model()) return false;
  const HeadRef head{layer, k};
  const bool knocked = sc.knockouts.has(head);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(knocked ? "Knocked out (right-click or K: bring it back)"
                              : "Right-click or K (selected head): knock this head out");
  if (ImGui::BeginPopupContextItem(("knockout/" + std::to_string(k)).c_str())) {
    const std::string name = format_heads({head});
    if (ImGui::MenuItem(((knocked ? "Bring back head " : "Knock out head ") + name).c_str(), "K"))
      state.apply(toggle_knockout(head));
    if (ImGui::MenuItem(("Knock out every head of layer " + std::to_string(layer) + " but " + name).c_str()))
      state.apply(keep_only_heads(layer, {k}));
    const bool mean = sc.knockouts.ablation == Ablation::mean;
    if (ImGui::MenuItem("Knocked-out context: zero", nullptr, !mean))
      state.apply(set_ablation(Ablation::zero));
    if (ImGui::MenuItem("Knocked-out context: its mean over positions", nullptr, mean))
      state.apply(set_ablation(Ablation::mean));
    if (ImGui::MenuItem("Bring every head back", nullptr, false, sc.knockouts.active()))
      state.apply(set_knockouts({}, sc.knockouts.ablation));
    ImGui::EndPopup();
  }
  return knocked;
}

// A knocked-out head's map, greyed and crossed: its pattern is what it would have done; the block
// used a zero (or mean) context instead.
void draw_knocked_out(const HeatmapEvent& ev, Ablation ablation) {
  if (ev.grid_max.x <= ev.grid_min.x) return;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  dl->AddRectFilled(ev.grid_min, ev.grid_max, IM_COL32(128, 128, 128, 150));
  const ImU32 red = IM_COL32(215, 60, 30, 230);
  const float t = std::max(2.0f, ImGui::GetFontSize() / 6);
  dl->AddLine(ev.grid_min, ev.grid_max, red, t);
  dl->AddLine(ImVec2(ev.grid_min.x, ev.grid_max.y), ImVec2(ev.grid_max.x, ev.grid_min.y), red, t);
  // The longest label that fits the map; on a small map the short one, smaller if it must be.
  const float room = ev.grid_max.x - ev.grid_min.x - 8;
  const char* label = ablation == Ablation::zero ? "knocked out: context 0" : "knocked out: context = mean";
  if (ImGui::CalcTextSize(label).x > room) label = ablation == Ablation::zero ? "knocked out (0)" : "knocked out (mean)";
  float font = ImGui::GetFontSize();
  if (const float w = ImGui::CalcTextSize(label).x; w > room) font = std::max(6.0f, font * room / w);
  const ImVec2 size = ImGui::GetFont()->CalcTextSizeA(font, FLT_MAX, 0.0f, label);
  const ImVec2 at((ev.grid_min.x + ev.grid_max.x - size.x) / 2, (ev.grid_min.y + ev.grid_max.y - size.y) / 2);
  dl->AddRectFilled(ImVec2(at.x - 4, at.y - 2), ImVec2(at.x + size.x + 4, at.y + size.y + 2),
                    IM_COL32(255, 255, 255, 230));
  dl->AddText(ImGui::GetFont(), font, at, red, label);
}

// One line for a compact view: the entropy against its maximum, orange where a row sum is off; the
// sums, and the rows with no visible key, on hover.
void row_check_line(const RowCheck& c) {
  const bool ok = c.max_err < 1e-4;
  const bool flagged = c.nan_rows > 0 || c.zero_rows > 0;
  ImGui::TextColored(
      ok && !flagged ? ImGui::GetStyleColorVec4(ImGuiCol_Text) : ImVec4(1.0f, 0.55f, 0.2f, 1.0f),
      "H %.2f/%.2f bits", c.entropy, c.entropy_max);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "entropy: the mean over the query rows of -sum p log2 p; %.2f bits (uniform over the keys a row "
        "may see) at most\nrow sums 1 %s %.0e (max |row sum - 1| over the rows with a visible key)%s",
        c.entropy_max, "\xC2\xB1", c.max_err,
        c.nan_rows > 0    ? ("\n" + std::to_string(c.nan_rows) + " rows NaN: no visible key").c_str()
        : c.zero_rows > 0 ? ("\n" + std::to_string(c.zero_rows) + " rows all 0: no visible key").c_str()
                          : "");
}

// compact: two short lines for a narrow map (every head on screen at once).
void row_check_lines(const RowCheck& c, bool compact = false) {
  // Beside its maximum, log2 of the keys a row may see (log2 S without a mask): where the head sits
  // between "one key" (0) and "uniform" (the maximum).
  ImGui::PushTextWrapPos(0);
  if (compact)
    ImGui::Text("H %.2f / %.2f bits", c.entropy, c.entropy_max);
  else
    ImGui::Text("entropy %.2f bits (max %.2f)", c.entropy, c.entropy_max);
  ImGui::PopTextWrapPos();
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "Mean over the query rows of -sum p log2 p.\n0 bits: each query looks at one key; %.2f bits (the "
        "mean "
        "of log2 of each row's visible keys): uniform over the keys it may see.",
        c.entropy_max);
  const bool ok = c.max_err < 1e-4;
  ImGui::TextColored(ok ? ImGui::GetStyleColorVec4(ImGuiCol_Text) : ImVec4(1.0f, 0.55f, 0.2f, 1.0f),
                     compact ? "sums 1%s%.0e" : "row sums 1 %s %.0e", "\xC2\xB1", c.max_err);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("max |row sum - 1| over the rows that have a visible key (softmax rows sum to 1).");
  if (c.nan_rows > 0 || c.zero_rows > 0) {
    ImGui::SameLine();
    ImGui::TextColored(ImVec4(1.0f, 0.25f, 0.8f, 1.0f), c.nan_rows > 0 ? "+%d NaN" : "+%d zero",
                       c.nan_rows > 0 ? c.nan_rows : c.zero_rows);
  }
}

// The weights as a zoomed-out map per head, from the result's weights overview (the app's largest
// sizes keep no attn_weights: 4·H·L·S' bytes a result). Each texel is the largest weight of a patch
// of query rows × keys; the row checks are the engine's, made while each row was in cache.
struct OverviewCache {
  std::weak_ptr<const ForwardResult<float>> source;
  int batch = -1, k = 0;                    // k: the overview's columns per texel
  int R = 0, C = 0;                         // texels
  std::int64_t rows_per = 0, keys_per = 0;  // query rows and keys a texel covers
  std::vector<float> maps;                  // (H + 1, R, C): every head's, then the average's
  // (H + 1, R, C): -inf where every weight of the patch is 0 (its keys blocked), else 0: the map's
  // hatching, as an additive mask.
  std::vector<float> empty;
  float hi = 0;                  // the largest finite weight of every head
  std::vector<RowCheck> checks;  // per head, then the average
  std::int64_t masked_rows = 0;  // NaN or all-zero (h, i) rows of this batch item
  bool nan_rows = false;
};

void build_overview(OverviewCache& c, const std::shared_ptr<const ForwardResult<float>>& source, int b,
                    int k) {
  const ForwardResult<float>& f = *source;
  const WeightsOverview<float>& o = f.overview;
  const int H = int(f.dims.H), L = int(f.dims.L), Ce = int(o.columns);
  c.source = source, c.batch = b, c.k = k;
  c.rows_per = o.block * k, c.keys_per = o.block * k;
  c.R = int((L + c.rows_per - 1) / c.rows_per), c.C = (Ce + k - 1) / k;
  const std::size_t plane = std::size_t(c.R) * std::size_t(c.C);
  c.maps.assign(std::size_t(H + 1) * plane, -std::numeric_limits<float>::infinity());
  c.checks.assign(std::size_t(H) + 1, RowCheck{});
  // Each texel: the largest of its patch's overview values, NaN when one is (a NaN row).
  auto pool = [&](int h) {
    const float* src = h < H ? o.weights->data() + (std::size_t(b) * H + std::size_t(h)) * std::size_t(L) * Ce
                             : o.average->data() + std::size_t(b) * std::size_t(L) * Ce;
    float* dst = c.maps.data() + std::size_t(h) * plane;
    std::vector<char> nan_texels(std::size_t(c.R), 0);  // texel rows holding a NaN row
    for (int i = 0; i < L; ++i) {
      const std::size_t r = std::size_t(i / c.rows_per);
      float* row = dst + r * std::size_t(c.C);
      const float* x = src + std::size_t(i) * Ce;
      if (std::isnan(x[0])) {  // the overview makes a NaN row NaN in every column
        nan_texels[r] = 1;
        continue;
      }
      if (k == 1) {
        for (int j = 0; j < Ce; ++j) row[j] = std::max(row[j], x[j]);
      } else {
        for (int j0 = 0, t = 0; j0 < Ce; j0 += k, ++t) {
          float m = row[t];
          for (int j = j0; j < std::min(Ce, j0 + k); ++j) m = std::max(m, x[j]);
          row[t] = m;
        }
      }
    }
    for (int r = 0; r < c.R; ++r)
      if (nan_texels[std::size_t(r)])
        std::fill(dst + std::size_t(r) * c.C, dst + std::size_t(r + 1) * c.C,
                  std::numeric_limits<float>::quiet_NaN());
    std::vector<RowPart> parts(static_cast<std::size_t>(L));
    const float* chk = o.checks->data() + (std::size_t(b) * (H + 1) + std::size_t(h)) * std::size_t(L) * 4;
    for (int i = 0; i < L; ++i) {
      RowPart& p = parts[std::size_t(i)];
      p.ent = chk[4 * i], p.ent_max = chk[4 * i + 1], p.err = chk[4 * i + 2];
      p.kind = RowPart::Kind(int(chk[4 * i + 3]));
    }
    c.checks[std::size_t(h)] = sum_rows(parts.data(), L);
  };
  both_halves(double(H + 1) * L * Ce, [&](int half) {
    for (int h = half; h <= H; h += 2) pool(h);
  });
  c.empty.resize(c.maps.size());
  for (std::size_t x = 0; x < c.maps.size(); ++x)
    c.empty[x] = c.maps[x] == 0.0f ? -std::numeric_limits<float>::infinity() : 0.0f;
  Range all;
  for (std::size_t x = 0; x < std::size_t(H) * plane; ++x)
    if (std::isfinite(c.maps[x])) all.hi = std::max(all.hi, c.maps[x]);
  c.hi = all.hi > 0 ? all.hi : 1.0f;
  c.masked_rows = 0;
  c.nan_rows = false;
  for (int h = 0; h < H; ++h) {
    c.masked_rows += c.checks[std::size_t(h)].nan_rows + c.checks[std::size_t(h)].zero_rows;
    c.nan_rows = c.nan_rows || c.checks[std::size_t(h)].nan_rows > 0;
  }
}

}  // namespace

struct HeadsPanel {
  HeadsCache cache;
  OverviewCache overview;
  void draw_overview(AppState& state, Textures& tex, const std::vector<int>& order, bool compact);
  std::vector<std::string> feature_labels;
  // The keys a mask edit blocks in this result's batch item (edited_keys), labelled on every map.
  std::weak_ptr<const ForwardResult<float>> marked_source;
  int marked_batch = -1;
  std::vector<int> marked_keys;
  HeadsInfo info;  // what the last frame drew
  void draw(Panels& panels, AppState& state, Textures& tex);
};

const HeadsInfo& heads_info(const Panels& panels) {
  static const HeadsInfo none;  // the view has not drawn yet
  return panels.heads ? panels.heads->info : none;
}

void draw_heads(Panels& panels, AppState& state, Textures& tex) {
  made(panels.heads).draw(panels, state, tex);
}

void HeadsPanel::draw(Panels& panels, AppState& state, Textures& tex) {
  info = HeadsInfo{};
  info.view = window_rect();
  if (!state.result.valid()) {
    ImGui::TextWrapped("No result yet: the heads appear once the inputs give a valid forward.");
    return;
  }
  ViewState& view = state.view();
  const ForwardResult<float>& f = *state.result.forward;
  const Dims& d = f.dims;
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  // A short view (a presenter font beside the lesson panel): the maps get the height. The controls
  // take their short labels, the formula one line that opens to the rest, each weights map one
  // line of checks, the notes under the grid one line each (the whole text on hover).
  const bool compact = ImGui::GetContentRegionAvail().y < font * kCompactLines;
  info.compact = compact;

  draw_what_if(panels, state);  // temperature and ÷√d_k: their effect shows here, stage by stage
  // Controls: stage and batch item (the colormap and "cell values" are in the left column).
  const int si = stage_index(view.stage);
  // A model with rotary positions adds one choice: its scores without the rotation.
  const bool rope_available = state.result.model && state.result.model->scores_without_rope;
  const bool rope = rope_available && view.stage == kRopeStage;
  // Compact, the combo shows the stage's name alone (the list keeps the formulas).
  const char* preview = compact ? (rope ? kRopeStage : kStages[si].name)
                        : rope  ? kRopeLabel
                                : kStages[si].label;
  const float combo_w =
      compact ? ImGui::CalcTextSize(preview).x + ImGui::GetFrameHeight() + style.FramePadding.x * 2
              : font * 14;
  ImGui::SetNextItemWidth(std::min(combo_w, ImGui::GetContentRegionAvail().x - labelled("stage", 0)));
  if (ImGui::BeginCombo("stage", preview)) {
    for (int i = 0; i < kStageCount; ++i)
      if (ImGui::Selectable(kStages[i].label, !rope && i == si)) view.stage = kStages[i].name;
    if (rope_available && ImGui::Selectable(kRopeLabel, rope)) view.stage = kRopeStage;
    ImGui::EndCombo();
  }
  lesson_mark_item(state, "stage");
  if (rope) {
    info.maps = draw_rope(state, tex, compact);
    return;
  }
  const int N = int(d.N), H = int(d.H);
  const int b = std::clamp(view.batch_index, 0, N - 1);
  if (N > 1) {
    same_line_if_fits(labelled("batch item", font * 6));
    int pick = b;
    ImGui::SetNextItemWidth(font * 6);
    if (ImGui::SliderInt("batch item", &pick, 0, N - 1)) view.batch_index = pick;
    lesson_mark_item(state, "batch_index");
  }
  // A checkbox's or a combo's width with its label (the text before any "##").
  auto with_label = [&](const char* label, float w) {
    return w + style.ItemInnerSpacing.x + ImGui::CalcTextSize(label, nullptr, true).x;
  };
  if (si == kWeights) {
    const char* row_max = compact ? "row max###row_scale" : "colour each row to its max###row_scale";
    same_line_if_fits(with_label(row_max, ImGui::GetFrameHeight()));
    ImGui::Checkbox(row_max, &view.weights_row_scale);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "Each row's colours run from 0 to that row's largest weight, so rows that spread their\n"
          "weight thin (a causal mask's long rows, ~1/T each) show their pattern too.\n"
          "Cell values stay the weights themselves.");
  }
  // With a model: each head's measured role, and the heads ordered by one of the scores.
  const RoleTable* roles =
      state.result.model && state.result.model->roles && !state.result.model->roles->heads.empty()
          ? state.result.model->roles.get()
          : nullptr;
  const std::int64_t layer = state.result.model ? state.result.model->layer : 0;
  if (roles) {
    const char* order_label = compact ? "order###order_heads" : "order heads by###order_heads";
    same_line_if_fits(with_label(order_label, font * 8));
    ImGui::SetNextItemWidth(font * 8);
    ImGui::Combo(order_label, &view.head_order, kHeadOrderNames);
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "Scores measured on fixed probes (mha model-info --roles):\n"
          "prev-token: weight on the token just before, on ordinary sentences\n"
          "induction: on a random sequence repeated twice, weight on the token after the earlier copy\n"
          "first-token: weight parked on the first token (a sink)\n"
          "duplicate: weight on the earlier copy of the current token");
  }
  std::vector<int> order(static_cast<std::size_t>(H));
  for (int h = 0; h < H; ++h) order[std::size_t(h)] = h;
  if (roles && view.head_order > 0 && roles->n_head == H) {
    auto score = [&](int h) { return head_order_score(roles->at(layer, h), view.head_order); };
    std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return score(a) > score(c); });
  }
  same_line_if_fits(ImGui::CalcTextSize("Export...").x + font);
  export_button(state, kStages[si].name, std::clamp(view.sel_head, 0, int(f.dims.H) - 1));

  // At the largest sizes the result keeps no weights, only their overview: every head zoomed out.
  if (si == kWeights && f.overview.valid() && !f.trace.has("attn_weights")) {
    draw_overview(state, tex, order, compact);
    return;
  }
  // A stage the forward left out (large sizes) is computed once per result, off the UI thread.
  if (!stages_ready(state.stages, {state.result.forward},
                    {kStages[si].name, "attn_weights", "attn_weights_avg"}))
    return;
  const Stage<float>* sp = find_stage(f, kStages[si].name);
  if (!sp || sp->shape.size() != 4 || !find_stage(f, "attn_weights") || !find_stage(f, "attn_weights_avg")) {
    ImGui::TextWrapped(
        "This result does not hold stage '%s', and it cannot be computed here: the GPU computed this "
        "result, or the stage would not fit in memory. Pick another stage.",
        kStages[si].name);
    return;
  }
  const Stage<float>& s = *sp;
  const Stage<float>* mask = f.trace.find("attn_mask");
  const std::string note =
      s.note + (si == kContext ? ". Rows: query tokens; columns: the head's d_k features." : "");
  stage_formula(shape_str(s.shape) + " " + s.name, s.formula, note, compact);

  const std::uint64_t gen = state.result.generation;
  if (!same_owner(cache.source, state.result.forward) || cache.stage != si || cache.batch != b) {
    rebuild(cache, state.result.forward, si, b, false, state.result.rows_changed.get(),
            state.result.changed_since.lock());
    if (std::getenv("MHA_VERIFY_HEADS")) verify_rebuild(cache, state.result.forward, si, b);
  }

  // Colours: scores are signed around 0, so diverging with a symmetric range; weights are
  // probabilities, so sequential from 0; context follows the user's map. The exporter draws a
  // figure by the same rule (render/colour_range.hpp).
  const Colormap cmap = render::stage_colormap(kStages[si].name, state.window().colormap);
  const bool row_scale = si == kWeights && view.weights_row_scale;
  const render::ColourRange range =
      render::auto_colour_range({cache.lo, cache.hi, cache.maxabs}, cmap, si == kWeights, row_scale);
  const float vmin = range.vmin, vmax = range.vmax;

  const int R = int(s.shape[2]), C = int(s.shape[3]);
  // A mask edit's result: the query rows of this batch item that may differ from the last result.
  const std::vector<char>* changed = state.result.rows_changed.get();
  const char* rows_hint = changed && changed->size() == std::size_t(d.N) * std::size_t(R)
                              ? changed->data() + std::size_t(b) * std::size_t(R)
                              : nullptr;
  const std::vector<std::string>* row_labels = &state.result.query_tokens;
  const std::vector<std::string>* col_labels =
      si == kContext ? &numbered(feature_labels, C) : &state.result.key_tokens;

  // The footer is measured first so the grid knows the height it may use.
  const bool blocks = mask && (si == kMasked || si == kWeights);
  const std::vector<std::string> footer = footer_lines(f, blocks, cache.nan_rows, cache.masked_rows);
  // Grid geometry, the colorbar to its right. Every map is whole on screen, at the largest cell
  // that fits: all of them where their cells stay readable (readable_cell); else the grid scrolls
  // by rows of maps, as many rows on screen as keep the cells readable, each whole; only when not
  // even one row of maps fits at a cell that shows its colour (large L) do the maps themselves
  // scroll, at cells of 0.7 of a text line.
  // Named, not bound: lambdas below capture them.
  const std::pair<float, float> area = grid_area(footer, compact);
  const float grid_w = area.first, grid_h = area.second;
  const int n_maps = H + 1;
  const float max_cell = font * 4.0f, pad = style.CellPadding.x * 2;
  const float min_cell = 3.0f;  // pixels: a cell still shows its colour
  // Text with each map: its title, and under a weights map its row checks; compact, one line of
  // checks, beside the title where the map is wide enough (check_beside).
  auto row_extra_for = [&](bool beside) {
    const int lines = 1 + (si != kWeights ? 0 : !compact ? 2 : beside ? 0 : 1);
    return float(lines) * ImGui::GetTextLineHeightWithSpacing() + style.CellPadding.y * 2 +
           style.ItemSpacing.y * 2;
  };
  const LabelSpace labels = label_space(row_labels, R, col_labels, C);
  // A map column holds its title and its check line unwrapped (compact: side by side), and cells of
  // at least a pixel.
  const float check_w = si != kWeights ? 0.0f
                        : compact      ? ImGui::CalcTextSize(kCheckLineShort).x
                                       : ImGui::CalcTextSize("H 0.00 / 0.00 bits").x;
  // Beside the check, the title keeps at least its head and, under GQA, its key/value head.
  const float title_min = ImGui::CalcTextSize(d.G < d.H ? "head 00 \xC2\xB7 kv 0" : "head 00").x;
  const float beside_w = check_w + style.ItemSpacing.x + title_min;
  const float min_w = std::max({font * 5, check_w, labels.row_w + font * 1.5f + float(C)});
  // Readable: cells of 0.4 of a text line (the labels then fit in lanes), or a map of six text
  // lines where the tokens are many; never under min_cell.
  const float readable_cell = std::max(min_cell, std::min(font * 0.4f, font * 6.0f / float(std::max(R, C))));
  // What fit_heatmap reads of each map: the widest labels stand for all of them (it measures only
  // the widest), so each candidate grid costs no pass over the tokens.
  const std::vector<std::string> widest_row{widest_label(row_labels, R)},
      widest_col{widest_label(col_labels, C)};
  Heatmap proto;
  proto.rows = R, proto.cols = C, proto.row_labels = &widest_row, proto.col_labels = &widest_col;
  proto.max_cell = max_cell;
  ImVec2 map_room(0, 0);  // each map's room in the grid: its width, and height down to its check lines
  float map_h = 0;        // the height of a map as drawn
  int cols = 1, rows_shown = (n_maps + cols - 1) / cols;
  float cell = 0;
  bool check_beside = false;
  {
    // Every grid: c maps a row, k rows of maps on screen (k below the rows of maps: the grid
    // scrolls, its scrollbar taking width). One whole on screen counts. The best is readable at
    // most: every token labelled and readable cells, else readable cells (large L: its labels are
    // thinned at any size); then it shows the most maps, then has the largest cell; on a tie, more
    // columns. The labels are planned as the widget plans them (draw_heatmap).
    const float label_min = label_min_scale(font), lane_gap = font * 0.4f;
    auto labels_whole = [&](const HeatmapFit& f) {
      const bool rows =
          plan_axis_labels(f.fit, font, f.widest_row, f.row_w - style.ItemSpacing.x, label_min, lane_gap)
              .step == 1;
      const bool cols_ok = !f.vertical || plan_axis_labels(f.fit, font, f.widest_col,
                                                           f.col_w - style.ItemSpacing.y, label_min, lane_gap)
                                                  .step == 1;
      return rows && cols_ok;
    };
    int best_level = -1, best_seen = -1;
    float best_cell = 0;
    for (int c = 1; c <= n_maps; ++c) {
      const int total_rows = (n_maps + c - 1) / c;
      for (int k = total_rows; k >= 1; --k) {
        const float width = k < total_rows ? grid_w - style.ScrollbarSize : grid_w;
        // The map's own room: its height less the pixel the widget draws under the cells.
        const bool beside = compact && si == kWeights && width / float(c) - pad >= beside_w;
        const ImVec2 room(width / float(c) - pad, grid_h / float(k) - row_extra_for(beside) - 1.0f);
        if ((c > 1 && room.x < min_w) || room.y < 1) continue;
        const HeatmapFit fit = fit_heatmap(proto, room);
        const float h = fit.top + fit.fit * float(R) + 1.0f;
        if (h > room.y + 1.5f || fit.fit < min_cell) continue;  // not whole, or no colour
        const int level = fit.fit < readable_cell ? 0 : labels_whole(fit) ? 2 : 1;
        const int seen = level > 0 ? std::min(n_maps, c * k) : 0;
        if (level > best_level || (level == best_level && seen > best_seen) ||
            (level == best_level && seen == best_seen && fit.fit >= best_cell - 0.25f)) {
          best_level = level, best_seen = seen, best_cell = fit.fit;
          cols = c, rows_shown = k, cell = fit.fit, map_room = room, map_h = h, check_beside = beside;
        }
      }
    }
  }
  if (cell < min_cell) {
    // Scrolling: the widest grid whose maps are >= ten text heights wide with cells >= 0.7 of a
    // text line (every other label fits), else (large L) the widest at that width alone.
    const float usable = grid_w - style.ScrollbarSize, wide = std::max(font * 10, min_w);
    auto cell_at = [&](int c) { return cell_for_width(labels, usable / float(c) - pad, C, max_cell); };
    const int widest = std::clamp(int(usable / (wide + pad)), 1, n_maps);
    cols = widest;
    while (cols > 1 && cell_at(cols) < font * 0.7f) --cols;
    if (cell_at(cols) < font * 0.7f) cols = widest;
    cell = cell_at(cols);
    map_h = map_height(labels, cell, R);
    map_room = ImVec2(0, map_h);
    rows_shown = 0;
    check_beside = false;
  }
  const float row_extra = row_extra_for(check_beside);
  info.cols = cols;
  info.rows_shown = rows_shown;
  info.cell = cell;
  if (!same_owner(marked_source, state.result.forward) || marked_batch != b) {
    marked_source = state.result.forward;
    marked_batch = b;
    marked_keys.clear();
    // One pass over the lower triangle of the mask: kept to sizes where that is a few milliseconds.
    if (mask && double(mask->strides[1] == 0 ? 1 : H) * R * C <= double(1 << 22))
      marked_keys = edited_keys(*mask, b);
  }
  // Where the grid scrolls by rows of maps, it is as tall as the rows it shows whole: no next row
  // peeks in cut off.
  const float total = float((n_maps + cols - 1) / cols) * (map_h + row_extra);
  const float child_h =
      std::min(rows_shown > 0 ? float(rows_shown) * (map_h + row_extra) : grid_h, std::min(grid_h, total));
  ImGui::BeginChild("heads_grid", ImVec2(grid_w, child_h), false);
  {  // the grid's part on screen: within the view's
    const ImVec4 g = window_rect();
    info.view = ImVec4(std::max(g.x, info.view.x), std::max(g.y, info.view.y), std::min(g.z, info.view.z),
                       std::min(g.w, info.view.w));
  }
  if (ImGui::BeginTable("heads_table", cols, ImGuiTableFlags_SizingStretchSame)) {
    for (int slot = 0; slot < n_maps; ++slot) {
      ImGui::TableNextColumn();
      const bool avg = slot == H;
      const int k = avg ? H : order[std::size_t(slot)];  // the head drawn in this slot
      const float w = ImGui::GetContentRegionAvail().x;
      // Compact, a wide weights map's check line follows its title on the same line.
      const float cell_x = ImGui::GetCursorPosX();
      head_title(d, state.result.model ? &*state.result.model : nullptr, k, si == kWeights,
                 check_beside ? w - check_w - style.ItemSpacing.x : 0);
      const bool knocked = !avg && knockout_menu(state, layer, k);
      if (check_beside) {
        ImGui::SameLine();  // at the column's right edge
        ImGui::SetCursorPosX(std::max(ImGui::GetCursorPosX(), cell_x + w - check_w));
        const ImVec2 at = ImGui::GetCursorScreenPos();
        if (ImGui::IsRectVisible(at, ImVec2(at.x + check_w, at.y + ImGui::GetTextLineHeight())))
          ensure_checks(cache, k);
        if (cache.due[std::size_t(k)]) {
          ImGui::TextDisabled("checks: when shown");
          info.entropy_max.push_back(-1);
        } else {
          row_check_line(cache.checks[std::size_t(k)]);
          info.entropy_max.push_back(cache.checks[std::size_t(k)].entropy_max);
        }
      }

      Heatmap hm;
      hm.id = std::string("heads/") + kStages[si].name + "/" + std::to_string(k);
      Plane p;
      if (!avg)
        p = head_plane(s, b, k);
      else if (si == kWeights)
        p = item_plane(*find_stage(f, "attn_weights_avg"), b);
      else
        p = Plane{cache.mean.data(), C, 1, R, C};
      hm.values = p.p;
      hm.rows = R;
      hm.cols = C;
      hm.row_stride = p.rs;
      hm.col_stride = p.cs;
      hm.vmin = vmin;
      hm.vmax = vmax;
      hm.colormap = cmap;
      hm.row_scale = row_scale;
      hm.row_labels = row_labels;
      hm.col_labels = col_labels;
      hm.show_values = view.show_values;
      hm.max_cell = max_cell;
      // The width planned (the table's column may be a little wider): the map is as tall as planned.
      hm.size = ImVec2(map_room.x > 0 ? std::min(w, map_room.x) : w, map_room.y);
      // The colours in the version too: a mask edit's result redraws only its changed rows when they
      // are those of the texture it replaces.
      auto version_of = [&](std::uint64_t g) {
        return mix({g, std::uint64_t(si), std::uint64_t(b), std::uint64_t(cmap), std::uint64_t(row_scale),
                    float_bits(vmin), float_bits(vmax)});
      };
      hm.version = version_of(gen);
      if (rows_hint && state.result.changed_since_generation) {
        hm.changed_since = version_of(state.result.changed_since_generation);
        hm.changed_rows = rows_hint;
      }
      if (si == kMasked) {
        hm.blocked = [p](int i, int j) { return neg_inf(p.at(i, j)); };
        hm.blocked_mask = p.p, hm.blocked_row_stride = p.rs, hm.blocked_col_stride = p.cs;
      } else if (si == kWeights && mask) {
        if (avg) {
          const std::uint8_t* bl = cache.avg_blocked.data();
          hm.blocked = [bl, C](int i, int j) {
            return bl[std::size_t(i) * std::size_t(C) + std::size_t(j)] != 0;
          };
        } else {
          const Plane m = head_plane(*mask, b, k);
          hm.blocked = [m](int i, int j) { return neg_inf(m.at(i, j)); };
          hm.blocked_mask = m.p, hm.blocked_row_stride = m.rs, hm.blocked_col_stride = m.cs;
        }
      }
      if (!avg && k == view.sel_head && si != kContext) {
        hm.selected_row = view.sel_query;
        hm.selected_col = view.sel_key;
      }
      // A head's map reads only the result (its stage and mask): the copy menu reads it when asked.
      // The average's may read this view's cache, which the next result rebuilds: copied when kept.
      if (!avg) hm.owner = state.result.forward;
      hm.zoomable = true;
      hm.hover_row = view.hover_query;  // linked hover: the token under the pointer in any view
      hm.hover_col = si == kContext ? -1 : view.hover_key;
      if (si != kContext) hm.marked_cols = marked_keys;
      const HeatmapEvent ev = draw_heatmap(tex, hm);
      if (knocked) draw_knocked_out(ev, state.scenario().knockouts.ablation);
      info.maps.push_back(ev);
      if (si != kContext)
        report_hover(ev);
      else if (ev.hovered || ev.label_row >= 0)  // context columns are features, not tokens
        report_hover(ev.hovered ? ev.row : ev.label_row, -1);
      // A click selects for the inspector; it is view state, so it records no undo step.
      if (ev.clicked) {
        view.sel_query = ev.row;
        if (si != kContext) view.sel_key = ev.col;
        if (!avg) view.sel_head = k;
      }
      if (si == kWeights && !check_beside) {  // a map's row checks are made when they come on screen
        const ImVec2 at = ImGui::GetCursorScreenPos();
        if (ImGui::IsRectVisible(at, ImVec2(at.x + w, at.y + ImGui::GetTextLineHeightWithSpacing() * 2)))
          ensure_checks(cache, k);
        if (cache.due[std::size_t(k)]) {
          ImGui::TextDisabled(compact ? "checks: when shown" : "entropy: when shown");
          if (!compact) ImGui::TextDisabled("row sums: when shown");
          info.entropy_max.push_back(-1);
        } else if (compact) {
          row_check_line(cache.checks[std::size_t(k)]);
          info.entropy_max.push_back(cache.checks[std::size_t(k)].entropy_max);
        } else {
          // Narrow maps (a large font) get the short form, so the lines do not wrap under the grid.
          row_check_lines(cache.checks[std::size_t(k)],
                          w < ImGui::CalcTextSize("entropy 0.00 bits (max 0.00)").x);
          info.entropy_max.push_back(cache.checks[std::size_t(k)].entropy_max);
        }
      } else if (!check_beside) {
        info.entropy_max.push_back(-1);
      }
    }
    ImGui::EndTable();
  }
  ImGui::EndChild();
  grid_end(tex, cmap, vmin, vmax, child_h, row_scale, footer, compact);
}

void HeadsPanel::draw_overview(AppState& state, Textures& tex, const std::vector<int>& order, bool compact) {
  ViewState& view = state.view();
  const ForwardResult<float>& f = *state.result.forward;
  const Dims& d = f.dims;
  const WeightsOverview<float>& o = f.overview;
  const float font = ImGui::GetFontSize();
  const ImGuiStyle& style = ImGui::GetStyle();
  const int H = int(d.H), n_maps = H + 1;
  const int b = std::clamp(view.batch_index, 0, int(d.N) - 1);
  const std::int64_t R0 = (d.L + o.block - 1) / o.block, C0 = o.columns;  // texels at the overview's own size

  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));

  // Footer first (the grid takes what is left), from the last cache of this result when there is
  // one: the counts it shows do not depend on the zoom.
  const bool cached = same_owner(overview.source, state.result.forward) && overview.batch == b;
  const std::int64_t shown_patch = cached ? overview.rows_per : o.block;  // until this frame's layout
  ImGui::TextWrapped(
      "%s attn_weights, zoomed out: each cell is the largest weight of a %lld x %lld patch "
      "(query rows x keys)",
      shape_str({d.N, d.H, d.L, d.S_total}).c_str(), (long long)shown_patch, (long long)shown_patch);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "At this size the weights themselves (%.0f MiB) are not kept: the forward pools and checks each\n"
        "row as it computes it. Hover a cell for its patch; the Inspector and the other views compute\n"
        "exact rows on demand.",
        double(d.N) * double(d.H) * double(d.L) * double(d.S_total) * 4.0 / (1 << 20));
  ImGui::PopStyleColor();
  std::vector<std::string> footer =
      footer_lines(f, false, cached && overview.nan_rows, cached ? overview.masked_rows : 0);
  footer.insert(footer.begin(),
                "Grey hatched cells: every weight of the patch is 0 (its keys blocked by the mask).");
  // Every map on screen: the column count that gives the largest cells, then texels of a pixel or
  // more (k overview columns to a texel).
  // Named, not bound: lambdas below capture them.
  const std::pair<float, float> area = grid_area(footer, compact);
  const float grid_w = area.first, grid_h = area.second;
  const float pad = style.CellPadding.x * 2;
  const float text_h = 3.0f * ImGui::GetTextLineHeightWithSpacing();  // title, then two check lines
  const float row_extra = text_h + style.CellPadding.y * 2 + style.ItemSpacing.y * 2;
  const float min_w = ImGui::CalcTextSize("H 10.00 / 10.00 bits").x;  // the check lines fit
  int cols = 1;
  float px = 0;  // pixels per overview texel
  for (int c = 1; c <= n_maps; ++c) {
    const int rows = (n_maps + c - 1) / c;
    const float w = grid_w / float(c) - pad, h = grid_h / float(rows) - row_extra;
    if (c > 1 && w < min_w) break;
    const float fit = std::min(w / float(C0), h / float(R0));
    if (fit >= px) cols = c, px = fit;
  }
  // No room for every map at a legible size (a large font, a small window): maps of side_min, as
  // many to a row as fit, and the grid scrolls.
  const float side_min = font * 4;
  if (px * float(std::max(R0, C0)) < side_min) {
    const float w = std::max(side_min, min_w);
    cols = std::clamp(int((grid_w - style.ScrollbarSize) / (w + pad)), 1, n_maps);
    px = side_min / float(std::max(R0, C0));
  }
  const int k = std::clamp(int(std::ceil(1.0f / std::max(px, 1e-3f))), 1, int(std::max(R0, C0)));
  if (!cached || overview.k != k) build_overview(overview, state.result.forward, b, k);
  const OverviewCache& c = overview;
  const float cell = std::max(1.0f, px * float(k));
  const float map_w = cell * float(c.C), map_h = cell * float(c.R);

  const Colormap cmap = render::stage_colormap("attn_weights", state.window().colormap);
  const bool row_scale = view.weights_row_scale;
  const render::ColourRange range = render::auto_colour_range({0, c.hi, c.hi}, cmap, true, row_scale);
  const float vmin = range.vmin, vmax = range.vmax;
  const std::uint64_t gen = state.result.generation;
  const std::size_t plane = std::size_t(c.R) * std::size_t(c.C);
  const float child_h = std::min(grid_h, float((n_maps + cols - 1) / cols) * (map_h + row_extra));
  ImGui::BeginChild("heads_grid", ImVec2(grid_w, child_h), false);
  if (ImGui::BeginTable("heads_table", cols, ImGuiTableFlags_SizingStretchSame)) {
    for (int slot = 0; slot < n_maps; ++slot) {
      ImGui::TableNextColumn();
      const int h = slot == H ? H : order[std::size_t(slot)];
      head_title(d, state.result.model ? &*state.result.model : nullptr, h, true);
      Heatmap hm;
      hm.id = std::string("heads/overview/") + std::to_string(h);
      hm.values = c.maps.data() + std::size_t(h) * plane;
      hm.rows = c.R, hm.cols = c.C, hm.row_stride = c.C, hm.col_stride = 1;
      hm.vmin = vmin, hm.vmax = vmax;
      hm.colormap = cmap;
      hm.row_scale = row_scale;
      hm.show_values = false;
      hm.margins = false;
      hm.max_cell = cell;
      hm.size = ImVec2(map_w, map_h);
      hm.version = mix({gen, std::uint64_t(b), std::uint64_t(k), std::uint64_t(cmap),
                        std::uint64_t(row_scale), float_bits(vmax), 0x6f76u});
      hm.blocked_mask = c.empty.data() + std::size_t(h) * plane;
      hm.blocked_row_stride = c.C, hm.blocked_col_stride = 1;
      const float* empty = hm.blocked_mask;
      const int C = c.C;
      hm.blocked = [empty, C](int i, int j) {
        return std::isinf(empty[std::size_t(i) * std::size_t(C) + std::size_t(j)]);
      };
      hm.patch_rows = c.rows_per, hm.patch_cols = c.keys_per;
      hm.stage_rows = d.L, hm.stage_cols = d.S_total;
      if (h < H && h == view.sel_head && view.sel_query >= 0) {
        hm.selected_row = int(view.sel_query / c.rows_per);
        hm.selected_col = view.sel_key >= 0 ? int(view.sel_key / c.keys_per) : -1;
      }
      hm.hover_row = view.hover_query >= 0 ? int(view.hover_query / c.rows_per) : -1;
      hm.hover_col = view.hover_key >= 0 ? int(view.hover_key / c.keys_per) : -1;
      const HeatmapEvent ev = draw_heatmap(tex, hm);
      if (ev.hovered) report_hover(int(ev.row * c.rows_per), int(ev.col * c.keys_per));
      if (ev.clicked) {  // the patch's first cell, for the inspector
        view.sel_query = int(ev.row * c.rows_per);
        view.sel_key = int(ev.col * c.keys_per);
        if (h < H) view.sel_head = h;
      }
      row_check_lines(c.checks[std::size_t(h)], true);
    }
    ImGui::EndTable();
  }
  ImGui::EndChild();
  grid_end(tex, cmap, vmin, vmax, child_h, row_scale, footer, compact);
}

}  // namespace mha::app
