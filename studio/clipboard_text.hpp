// A heatmap's values as text for the clipboard: TSV (pastes into a spreadsheet, labels as the first
// row and column) and a numpy literal (pastes into Python). No GUI: the app puts the text on the
// clipboard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mha::studio {

// A strided 2-D view (rows = queries, cols = keys), as the heatmap widget draws it.
struct MatrixView {
  const float* values = nullptr;
  int rows = 0, cols = 0;
  std::int64_t row_stride = 0, col_stride = 1;  // in elements
};

// Tab-separated values, one line a row ending in "\n". With labels, the first line holds the key
// labels after an empty corner cell and each row starts with its query label (tabs and newlines in a
// label become spaces). Values print with 9 significant digits (float32 round-trips); NaN as "NaN",
// infinities as "inf" / "-inf", which spreadsheets read as text rather than a wrong number.
std::string matrix_tsv(const MatrixView& m, const std::vector<std::string>* row_labels = nullptr,
                       const std::vector<std::string>* col_labels = nullptr);

// `np.array([[a, b], [c, d]], dtype=np.float32)`; NaN as np.nan, infinities as np.inf / -np.inf.
std::string matrix_numpy(const MatrixView& m);

}  // namespace mha::studio
