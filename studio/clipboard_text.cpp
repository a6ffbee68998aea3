// See clipboard_text.hpp.
#include "clipboard_text.hpp"

#include <cmath>
#include <cstdio>

namespace mha::studio {

namespace {

float at(const MatrixView& m, int r, int c) {
  return m.values[std::int64_t(r) * m.row_stride + std::int64_t(c) * m.col_stride];
}

// %.9g: the shortest form that reads back as the same float32 is at most 9 digits.
std::string number(float v, const char* nan, const char* inf, const char* minus_inf) {
  if (std::isnan(v)) return nan;
  if (std::isinf(v)) return v > 0 ? inf : minus_inf;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(v));
  return buf;
}

std::string cell_label(const std::string& s) {
  std::string out = s;
  for (char& ch : out)
    if (ch == '\t' || ch == '\n' || ch == '\r') ch = ' ';
  return out;
}

}  // namespace

std::string matrix_tsv(const MatrixView& m, const std::vector<std::string>* row_labels,
                       const std::vector<std::string>* col_labels) {
  std::string out;
  if (!m.values || m.rows <= 0 || m.cols <= 0) return out;
  const bool rows_named = row_labels && !row_labels->empty();
  if (col_labels && !col_labels->empty()) {
    for (int c = 0; c < m.cols; ++c) {
      if (c > 0 || rows_named) out += '\t';
      out += c < int(col_labels->size()) ? cell_label((*col_labels)[std::size_t(c)]) : std::to_string(c);
    }
    out += '\n';
  }
  for (int r = 0; r < m.rows; ++r) {
    if (rows_named)
      out += (r < int(row_labels->size()) ? cell_label((*row_labels)[std::size_t(r)]) : std::to_string(r)) +
             '\t';
    for (int c = 0; c < m.cols; ++c) {
      if (c > 0) out += '\t';
      out += number(at(m, r, c), "NaN", "inf", "-inf");
    }
    out += '\n';
  }
  return out;
}

std::string matrix_numpy(const MatrixView& m) {
  std::string out = "np.array([";
  for (int r = 0; m.values && r < m.rows; ++r) {
    out += r ? ",\n          [" : "[";
    for (int c = 0; c < m.cols; ++c) {
      if (c > 0) out += ", ";
      out += number(at(m, r, c), "np.nan", "np.inf", "-np.inf");
    }
    out += ']';
  }
  out += "], dtype=np.float32)";
  return out;
}

}  // namespace mha::studio
