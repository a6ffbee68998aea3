// A printed document of text and figures: headings, paragraphs of the Markdown subset the lessons
// use (**bold**, `code`, "- " list items), boxed notes and figures, laid out on A4 pages of a vector
// PDF. The figures are drawn by the figure exporter's own drawing (draw_figure), scaled to fit, so a
// handout's heatmaps are `mha export`'s; the text is set in the same bundled font.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heatmap_export.hpp"

namespace mha::exporter {

// A stretch of one style within a line of text.
struct TextRun {
  enum class Style { plain, bold, code };
  std::string text;
  Style style = Style::plain;
};

// One line of the Markdown subset ("**bold** and `code`") as runs. An unclosed marker is text.
std::vector<TextRun> markdown_runs(const std::string& line);

struct DocBlock {
  enum class Kind {
    title,       // the document's title: large
    heading,     // a step's title
    kicker,      // a small grey line above a heading ("Step 2 of 8")
    paragraph,   // wrapped text
    bullet,      // a list item
    note,        // a paragraph in a bordered box (a task)
    figure,      // `spec` or `drawing`, scaled into the rest of the page, `caption` under it
    page_break,  // the next block starts a page (never a blank one)
  };
  Kind kind = Kind::paragraph;
  std::vector<TextRun> runs;
  const ExportSpec* spec = nullptr;  // figure: one of these, owned by the caller
  const Drawing* drawing = nullptr;
  std::string caption;  // figure: one line under it
  std::string marker;   // bullet: what stands before it ("1."); empty: a bullet point
};

struct Document {
  std::string title;  // the PDF's metadata title
  std::string font_path;
  std::vector<DocBlock> blocks;
};

struct RenderedDocument {
  std::vector<std::uint8_t> pdf;
  int pages = 0;
};

// A4 portrait pages (595 × 842 pt, 56 pt margins). Text wraps at spaces; a block that does not fit
// what is left of a page goes to the next; a figure is scaled to the page's width and to what is
// left of the page (at most 1 pt a figure pixel, a third larger than the single-figure PDF), and starts a
// page of its own when less than a third of one is left. Throws FileError (font) or ConfigError (a figure
// that cannot be laid out, a cairo failure).
RenderedDocument render_document_pdf(const Document& doc);

}  // namespace mha::exporter
