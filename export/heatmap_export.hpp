// Heatmap figures for slides and papers, with no GL and no window: one drawing through cairo,
// written as PNG, SVG or PDF (text from the bundled font through FreeType, so a figure looks the
// same on every machine), and the values as CSV. Used by `mha export` and the app's Export dialog.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "colormap.hpp"

typedef struct _cairo cairo_t;

namespace mha::exporter {

// One heatmap: a strided 2-D view (no copy), rows = queries, cols = keys.
struct Panel {
  std::string title;  // above the panel in a grid ("head 3", "average"); may be empty
  const float* values = nullptr;
  int rows = 0, cols = 0;
  std::int64_t row_stride = 0, col_stride = 1;    // in elements
  std::vector<std::string> row_labels;            // queries; empty: 0, 1, 2, ...
  std::vector<std::string> col_labels;            // keys; empty: 0, 1, 2, ...
  std::function<bool(int row, int col)> blocked;  // masked cells: kMaskedColor, hatched
};

// A figure: one panel, or several (all heads + the average) in a grid sharing one colorbar. All
// panels must have the same rows and cols.
struct ExportSpec {
  std::string title;  // top line: stage, head, shapes
  std::vector<Panel> panels;
  int columns = 0;  // grid columns; 0: all in one row up to 4 panels, else ceil(sqrt(n))
  float vmin = 0, vmax = 1;
  render::Colormap colormap = render::Colormap::viridis;
  // Colour each row on [0, that row's largest finite, unblocked value] (render::row_colour_top), as
  // the Heads view's "colour each row to its max" does; vmin/vmax then label the colorbar (0 to 1:
  // a fraction of each row's largest) and printed values stay the values themselves.
  bool row_scale = false;
  bool show_values = false;  // print values in cells wide enough for them
  int cell_px = 0;           // pixels per cell; 0: automatic (48 px at teaching sizes, 1 px at L = 512)
  bool transparent = false;  // no background instead of white
  std::string font_path;     // a TrueType/OpenType font: assets/fonts/DejaVuSans.ttf
  float font_px = 13;        // label text height (ascent + descent); the title is 1.3× this
};

struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};

// Where everything goes, in pixels: the PNG's pixels, the SVG's user units, the PDF's points at
// 96 per inch. Cell (r, c) of panel p covers grids[p].x + c·cell … + cell, grids[p].y + r·cell …
// + cell; the centre pixel of every cell is its plain colour (hatching and borders never touch it).
struct Layout {
  int width = 0, height = 0;
  int cell = 0;
  std::vector<Rect> grids;            // each panel's cells
  std::vector<Rect> row_label_areas;  // left of each grid
  std::vector<Rect> col_label_areas;  // above each grid
  Rect title, colorbar;               // colorbar: the colour strip; tick labels to its right
  Rect colorbar_labels;
  bool col_labels_rotated = false;  // keys read upwards when they do not fit across a cell
  int row_step = 1, col_step = 1;   // every k-th label is drawn when cells are smaller than text
};

// Throws ConfigError (no panels, unequal panel sizes, non-positive sizes, a figure too large to
// draw) or FileError (font).
Layout layout(const ExportSpec& spec);
// RGBA PNG file bytes, layout(spec).width × height.
std::vector<std::uint8_t> render_png(const ExportSpec& spec);
// A standalone SVG document: cells as filled paths (up to 4096 cells a panel; larger maps as an
// embedded image, one pixel a cell at the layout's scale), text as glyph outlines.
std::string render_svg(const ExportSpec& spec);
// A one-page PDF, vectors as the SVG, text embedded as a font subset (searchable, copyable).
std::vector<std::uint8_t> render_pdf(const ExportSpec& spec);
// The figure drawn on `cr` from its user-space origin, one unit a layout pixel: what the writers
// above put on their surfaces, for a caller that places figures itself (a handout's pages).
// Throws as layout() does; a failed cairo drawing shows in cairo_status(cr).
void draw_figure(cairo_t* cr, const ExportSpec& spec);
// A 2-D slice as CSV: a header of key labels, each row led by its query label; NaN as "nan".
std::string render_csv(const Panel& panel);

// A free-form figure of filled boxes, polylines and text lines (the reshape figure, the √d_k plot), drawn
// with the same font and through the same cairo drawing as the heatmaps.
struct Drawing {
  struct Box {
    int x = 0, y = 0, w = 0, h = 0;
    std::uint32_t fill = 0;     // RGBA packed as colormap.hpp (R in the low byte)
    std::uint32_t outline = 0;  // a one-pixel border outside the box; 0: none
  };
  struct Text {
    int x = 0, y = 0;  // top-left of the line
    std::string text;
    std::uint32_t color = 0xFF202020;
    bool title = false;  // 1.3× the font size
  };
  struct Line {  // a polyline through points (x, y), as a plot's curve or axis
    std::vector<std::pair<float, float>> points;
    std::uint32_t color = 0xFF202020;
    float width = 1;
    bool dashed = false;
  };
  int width = 0, height = 0;
  bool transparent = false;
  std::string font_path;
  float font_px = 13;
  std::vector<Box> boxes;  // drawn in order, then the lines, then the text
  std::vector<Line> lines;
  std::vector<Text> texts;
};
// Throws ConfigError for a non-positive or too large size, FileError for the font.
std::vector<std::uint8_t> render_png(const Drawing& d);
std::string render_svg(const Drawing& d);
std::vector<std::uint8_t> render_pdf(const Drawing& d);
void draw_figure(cairo_t* cr, const Drawing& d);  // as draw_figure(cr, ExportSpec)

// Text sizes in a font at a pixel height (title: 1.3×), for laying out a Drawing; the figures are
// drawn with the same measurements.
class TextMeter {
 public:
  TextMeter(const std::string& font_path, float px);  // throws FileError
  ~TextMeter();
  int width(const std::string& s, bool title = false);
  int line(bool title = false) const;    // the height a line of text needs
  int ascent(bool title = false) const;  // from the top of a line to its baseline
  struct Fonts;
  Fonts& fonts() { return *fonts_; }

 private:
  std::unique_ptr<Fonts> fonts_;
};

// The formats a figure is written in, in the order the Export dialog offers them: the CLI's
// --format names, the file extensions, the dialog's buttons and the one writer below all come from
// this table. A heatmap figure goes in every format (CSV: its values, one panel only); a free-form
// Drawing only in the image formats.
struct FigureFormat {
  std::string name;       // as --format takes it: "png"
  std::string extension;  // with the dot, lower case: ".png"
  std::string label;      // the Export dialog's button: "PNG", "CSV (values)"
  bool image = true;      // a drawing of the figure; false: its values as text
  std::vector<std::uint8_t> (*heatmap)(const ExportSpec&) = nullptr;  // the file's bytes
  std::vector<std::uint8_t> (*drawing)(const Drawing&) = nullptr;     // null: not for a Drawing
};
const std::vector<FigureFormat>& figure_formats();
std::vector<std::string> figure_format_names();  // "png", "svg", "pdf", "csv"
// The table's row for `name`; ConfigError("--format") listing the names for any other.
const FigureFormat& figure_format(const std::string& name);
// The format a file name's extension names (case-insensitive: ".PDF" is "pdf"); "" for any other.
std::string format_from_extension(const std::string& path);

// A figure's file bytes in `format`. ConfigError for an unknown format, CSV of a figure with more
// than one panel, or CSV of a Drawing (an image only).
std::vector<std::uint8_t> render_figure(const std::string& format, const ExportSpec& spec);
std::vector<std::uint8_t> render_figure(const std::string& format, const Drawing& d);
// Renders and writes atomically (write_file); the CLI's, the app's and every figure's one writer.
void write_figure(const std::string& format, const ExportSpec& spec, const std::string& path);
void write_figure(const std::string& format, const Drawing& d, const std::string& path);

// Writes bytes to `path` atomically (temp file, fsync, rename: a failed or interrupted export keeps
// the old file whole); throws FileError naming the path and the reason (unwritable, disk full).
void write_file(const std::string& path, const void* data, std::size_t size);

}  // namespace mha::exporter
