// The document exporter (see document_export.hpp): blocks laid out top to bottom on A4 pages of a
// cairo PDF surface, text measured and drawn unhinted in the bundled font, figures drawn by
// draw_figure under a scale.
#include "document_export.hpp"

#include <cairo-ft.h>
#include <cairo-pdf.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <new>

#include "errors.hpp"
#include "font.hpp"
#include "labels.hpp"

namespace mha::exporter {

std::vector<TextRun> markdown_runs(const std::string& line) {
  std::vector<TextRun> runs;
  auto add = [&](const std::string& text, TextRun::Style style) {
    if (text.empty()) return;
    if (!runs.empty() && runs.back().style == style)
      runs.back().text += text;
    else
      runs.push_back({text, style});
  };
  std::size_t i = 0;
  while (i < line.size()) {
    if (line.compare(i, 2, "**") == 0) {
      const std::size_t end = line.find("**", i + 2);
      if (end != std::string::npos) {
        add(line.substr(i + 2, end - i - 2), TextRun::Style::bold);
        i = end + 2;
        continue;
      }
    } else if (line[i] == '`') {
      const std::size_t end = line.find('`', i + 1);
      if (end != std::string::npos) {
        add(line.substr(i + 1, end - i - 1), TextRun::Style::code);
        i = end + 1;
        continue;
      }
    }
    // Plain text up to the next marker (an unclosed one is taken as text).
    std::size_t next = line.find_first_of("*`", i + 1);
    while (next != std::string::npos && line[next] == '*' && line.compare(next, 2, "**") != 0)
      next = line.find_first_of("*`", next + 1);
    const std::size_t stop = next == std::string::npos ? line.size() : next;
    add(line.substr(i, stop - i), TextRun::Style::plain);
    i = stop;
  }
  return runs;
}

namespace {

// A4 in points, and the page's frame.
constexpr double kPageW = 595.276, kPageH = 841.89;
constexpr double kMargin = 56;
constexpr double kLeft = kMargin, kRight = kPageW - kMargin, kTop = kMargin, kBottom = kPageH - kMargin;
constexpr double kBody = 10.5;  // em of body text, points
// A figure pixel at most: a third larger than the single-figure PDF's 96 per inch, so a small heatmap
// fills more of an otherwise empty page.
constexpr double kFigurePoints = 1.0;
constexpr std::uint32_t kText = 0xFF202020;  // RGBA packed R in the low byte, as colormap.hpp
constexpr std::uint32_t kGrey = 0xFF707070;
constexpr std::uint32_t kCodeText = 0xFF3A2A8C;
constexpr std::uint32_t kCodeFill = 0xFFF0EDED;
constexpr std::uint32_t kNoteFill = 0xFFE8F6FB;
constexpr std::uint32_t kNoteBorder = 0xFFB89C3C;

void set_colour(cairo_t* cr, std::uint32_t rgba) {
  cairo_set_source_rgba(cr, (rgba & 0xFF) / 255.0, ((rgba >> 8) & 0xFF) / 255.0,
                        ((rgba >> 16) & 0xFF) / 255.0, (rgba >> 24) / 255.0);
}

// The face at an em size in points. Hinting off, as the figures: the same layout everywhere.
class DocFont {
 public:
  DocFont(cairo_font_face_t* face, double em) {
    cairo_matrix_t m, ctm;
    cairo_matrix_init_scale(&m, em, em);
    cairo_matrix_init_identity(&ctm);
    cairo_font_options_t* o = cairo_font_options_create();
    cairo_font_options_set_hint_style(o, CAIRO_HINT_STYLE_NONE);
    cairo_font_options_set_hint_metrics(o, CAIRO_HINT_METRICS_OFF);
    font_ = cairo_scaled_font_create(face, &m, &ctm, o);
    cairo_font_options_destroy(o);
    if (cairo_scaled_font_status(font_) != CAIRO_STATUS_SUCCESS) {
      cairo_scaled_font_destroy(font_);
      throw FileError("font", "cairo cannot size the font");
    }
    cairo_font_extents_t fe;
    cairo_scaled_font_extents(font_, &fe);
    ascent_ = fe.ascent;
    line_ = 1.4 * em;
  }
  ~DocFont() { cairo_scaled_font_destroy(font_); }
  DocFont(const DocFont&) = delete;
  DocFont& operator=(const DocFont&) = delete;

  double advance(const std::string& s) const {
    cairo_text_extents_t te;
    cairo_scaled_font_text_extents(font_, s.c_str(), &te);
    return te.x_advance;
  }
  double line() const { return line_; }  // baseline to baseline
  double ascent() const { return ascent_; }
  void draw(cairo_t* cr, double x, double baseline, const std::string& s, std::uint32_t rgba) const {
    set_colour(cr, rgba);
    cairo_set_scaled_font(cr, font_);
    cairo_move_to(cr, x, baseline);
    cairo_show_text(cr, s.c_str());
  }

 private:
  cairo_scaled_font_t* font_ = nullptr;
  double ascent_ = 0, line_ = 0;
};

// Regular and bold (the bundled font has no bold file: FreeType emboldens it) at one size.
struct FontPair {
  const DocFont& regular;
  const DocFont& bold;
  const DocFont& of(TextRun::Style s) const { return s == TextRun::Style::bold ? bold : regular; }
};

struct Word {
  std::string text;
  TextRun::Style style = TextRun::Style::plain;
  bool space_before = false;
  double width = 0;
};
struct Line {
  std::vector<Word> words;
};

// Runs broken into words at spaces and filled into lines at most `width` wide.
std::vector<Line> wrap(const std::vector<TextRun>& runs, const FontPair& f, double width) {
  std::vector<Word> words;
  bool space = false;
  for (const TextRun& r : runs) {
    const std::string text = render::valid_utf8(r.text);
    std::size_t i = 0;
    while (i < text.size()) {
      if (text[i] == ' ') {
        space = true;
        ++i;
        continue;
      }
      const std::size_t end = std::min(text.find(' ', i), text.size());
      words.push_back({text.substr(i, end - i), r.style, space, 0});
      words.back().width = f.of(r.style).advance(words.back().text);
      space = false;
      i = end;
    }
  }
  const double space_w = f.regular.advance(" ");
  std::vector<Line> lines(1);
  double x = 0;
  for (Word w : words) {
    const double add = (w.space_before ? space_w : 0) + w.width;
    if (x + add > width && !lines.back().words.empty()) {
      lines.emplace_back();
      w.space_before = false;
      x = 0;
    } else if (lines.back().words.empty()) {
      w.space_before = false;
    }
    x += (w.space_before ? space_w : 0) + w.width;
    lines.back().words.push_back(std::move(w));
  }
  return lines;
}

void draw_line(cairo_t* cr, const Line& line, const FontPair& f, double x, double baseline,
               std::uint32_t colour) {
  const double space_w = f.regular.advance(" ");
  for (const Word& w : line.words) {
    if (w.space_before) x += space_w;
    const DocFont& font = f.of(w.style);
    if (w.style == TextRun::Style::code) {
      set_colour(cr, kCodeFill);
      cairo_rectangle(cr, x - 1.5, baseline - font.ascent() - 0.5, w.width + 3, font.line() * 0.9);
      cairo_fill(cr);
    }
    font.draw(cr, x, baseline, w.text, w.style == TextRun::Style::code ? kCodeText : colour);
    x += w.width;
  }
}

cairo_status_t append(void* out, const unsigned char* data, unsigned int size) {
  try {
    auto* v = static_cast<std::vector<std::uint8_t>*>(out);
    v->insert(v->end(), data, data + size);
    return CAIRO_STATUS_SUCCESS;
  } catch (const std::bad_alloc&) {
    return CAIRO_STATUS_NO_MEMORY;
  }
}

class Pages {
 public:
  Pages(const Document& doc, std::vector<std::uint8_t>& out)
      : doc_(doc),
        face_(doc.font_path),
        bold_face_(doc.font_path),
        body_(face_.cairo(), kBody),
        body_bold_(bold_cairo(), kBody),
        small_(face_.cairo(), 8.5),
        heading_(bold_cairo(), 17),
        title_(bold_cairo(), 24) {
    surface_ = cairo_pdf_surface_create_for_stream(append, &out, kPageW, kPageH);
    cairo_pdf_surface_set_metadata(surface_, CAIRO_PDF_METADATA_TITLE, render::valid_utf8(doc.title).c_str());
    cairo_pdf_surface_set_metadata(surface_, CAIRO_PDF_METADATA_CREATOR, "MHA Studio");
    // No creation date: the same lesson gives the same bytes.
    cairo_pdf_surface_set_metadata(surface_, CAIRO_PDF_METADATA_CREATE_DATE, "");
    cr_ = cairo_create(surface_);
  }
  ~Pages() {
    if (cr_) cairo_destroy(cr_);
    if (surface_) cairo_surface_destroy(surface_);
  }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;

  int draw() {
    for (std::size_t k = 0; k < doc_.blocks.size(); ++k)
      block(doc_.blocks[k], k + 1 < doc_.blocks.size() ? &doc_.blocks[k + 1] : nullptr);
    end_page();
    cairo_status_t status = cairo_status(cr_);
    cairo_destroy(cr_);
    cr_ = nullptr;
    cairo_surface_finish(surface_);  // the PDF's last bytes
    if (status == CAIRO_STATUS_SUCCESS) status = cairo_surface_status(surface_);
    if (status == CAIRO_STATUS_NO_MEMORY) throw std::bad_alloc();
    if (status != CAIRO_STATUS_SUCCESS)
      throw ConfigError("export",
                        std::string("drawing the document failed: ") + cairo_status_to_string(status));
    return pages_;
  }

 private:
  cairo_font_face_t* bold_cairo() {
    cairo_ft_font_face_set_synthesize(bold_face_.cairo(), CAIRO_FT_SYNTHESIZE_BOLD);
    return bold_face_.cairo();
  }

  void end_page() {
    if (!page_open_) return;
    const std::string footer = render::valid_utf8(doc_.title) + "  \xC2\xB7  " + std::to_string(pages_);
    small_.draw(cr_, kRight - small_.advance(footer), kPageH - kMargin / 2, footer, kGrey);
    cairo_show_page(cr_);
    page_open_ = false;
  }
  void start_page() {
    if (page_open_) return;
    page_open_ = true;
    ++pages_;
    y_ = kTop;
  }
  // Room for `h` more points on this page, else a new one.
  void need(double h) {
    start_page();
    if (y_ + h > kBottom && y_ > kTop) {
      end_page();
      start_page();
    }
  }

  void text(const std::vector<TextRun>& runs, const FontPair& f, double x, double width, std::uint32_t colour,
            double keep_with_next = 0) {
    const std::vector<Line> lines = wrap(runs, f, width);
    for (std::size_t i = 0; i < lines.size(); ++i) {
      need(f.regular.line() + (i + 1 == lines.size() ? keep_with_next : 0));
      draw_line(cr_, lines[i], f, x, y_ + f.regular.ascent(), colour);
      y_ += f.regular.line();
    }
  }

  void block(const DocBlock& b, const DocBlock* next) {
    const FontPair body{body_, body_bold_};
    const double width = kRight - kLeft;
    switch (b.kind) {
      case DocBlock::Kind::page_break:
        end_page();  // no blank pages: a break with no page open does nothing
        break;
      case DocBlock::Kind::title:
        text(b.runs, FontPair{title_, title_}, kLeft, width, kText, 3 * body_.line());
        y_ += 0.5 * body_.line();
        break;
      case DocBlock::Kind::heading:
        text(b.runs, FontPair{heading_, heading_}, kLeft, width, kText, 3 * body_.line());
        y_ += 0.35 * body_.line();
        break;
      case DocBlock::Kind::kicker:
        text(b.runs, FontPair{small_, small_}, kLeft, width, kGrey, heading_.line() + 2 * body_.line());
        break;
      case DocBlock::Kind::paragraph:
        text(b.runs, body, kLeft, width, kText);
        if (!next || next->kind != DocBlock::Kind::bullet) y_ += 0.45 * body_.line();
        break;
      case DocBlock::Kind::bullet: {
        const double indent = b.marker.empty() ? 14 : 20;
        need(body_.line());
        body_.draw(cr_, kLeft + 3, y_ + body_.ascent(), b.marker.empty() ? "\xE2\x80\xA2" : b.marker, kText);
        text(b.runs, body, kLeft + indent, width - indent, kText);
        if (!next || next->kind != DocBlock::Kind::bullet) y_ += 0.45 * body_.line();
        break;
      }
      case DocBlock::Kind::note: {
        const double pad = 8;
        const std::vector<Line> lines = wrap(b.runs, body, width - 2 * pad);
        const double h = double(lines.size()) * body_.line() + 2 * pad - 0.3 * body_.line();
        need(h);
        set_colour(cr_, kNoteFill);
        cairo_rectangle(cr_, kLeft, y_, width, h);
        cairo_fill_preserve(cr_);
        set_colour(cr_, kNoteBorder);
        cairo_set_line_width(cr_, 1);
        cairo_stroke(cr_);
        double baseline = y_ + pad + body_.ascent();
        for (const Line& l : lines) {
          draw_line(cr_, l, body, kLeft + pad, baseline, kText);
          baseline += body_.line();
        }
        y_ += h + 0.6 * body_.line();
        break;
      }
      case DocBlock::Kind::figure: figure(b); break;
    }
  }

  void figure(const DocBlock& b) {
    double fw = 0, fh = 0;
    if (b.spec) {
      const Layout lay = layout(*b.spec);
      fw = lay.width;
      fh = lay.height;
    } else if (b.drawing) {
      fw = b.drawing->width;
      fh = b.drawing->height;
    } else {
      throw ConfigError("export", "a figure block holds no figure");
    }
    const double caption_h = b.caption.empty() ? 0 : small_.line() + 4;
    start_page();
    double room = kBottom - y_ - caption_h;
    if (room < (kBottom - kTop) / 3 && y_ > kTop) {
      end_page();
      start_page();
      room = kBottom - y_ - caption_h;
    }
    const double scale = std::min({kFigurePoints, (kRight - kLeft) / fw, room / fh});
    const double x = kLeft + ((kRight - kLeft) - fw * scale) / 2;
    cairo_save(cr_);
    cairo_translate(cr_, x, y_);
    cairo_scale(cr_, scale, scale);
    if (b.spec)
      draw_figure(cr_, *b.spec);
    else
      draw_figure(cr_, *b.drawing);
    cairo_restore(cr_);
    y_ += fh * scale + 2;
    if (!b.caption.empty()) {
      const std::string c = render::valid_utf8(b.caption);
      small_.draw(cr_, kLeft + ((kRight - kLeft) - small_.advance(c)) / 2, y_ + small_.ascent(), c, kGrey);
      y_ += caption_h;
    }
    y_ += 0.6 * body_.line();
  }

  const Document& doc_;
  FontFace face_, bold_face_;
  DocFont body_, body_bold_, small_, heading_, title_;
  cairo_surface_t* surface_ = nullptr;
  cairo_t* cr_ = nullptr;
  bool page_open_ = false;
  int pages_ = 0;
  double y_ = kTop;
};

}  // namespace

RenderedDocument render_document_pdf(const Document& doc) {
  RenderedDocument r;
  Pages pages(doc, r.pdf);
  r.pages = pages.draw();
  return r;
}

}  // namespace mha::exporter
