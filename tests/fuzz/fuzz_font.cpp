// libFuzzer target: the font validator (validate_font) on arbitrary bytes, and for the bytes it
// accepts, FreeType and cairo as a figure uses them: the face opened (FontFace), a line of text
// measured and drawn. Every input must give a FileError or a face that draws; anything else (a
// crash, a sanitizer report, another exception) is a bug. Seeds: tests/fuzz/corpus/font/.
#include <cairo.h>

#include <cstdint>
#include <cstdlib>

#include "errors.hpp"
#include "font.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const mha::exporter::FontFace face(data, size, "fuzz input");
    cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 64, 32);
    cairo_t* cr = cairo_create(surface);
    cairo_set_font_face(cr, face.cairo());
    cairo_set_font_size(cr, face.em_for_line(13));
    cairo_text_extents_t te;
    cairo_text_extents(cr, "Attention 0.25 \xE2\x86\x92 \xE2\x80\xA6", &te);
    cairo_move_to(cr, 2, 20);
    cairo_show_text(cr, "Attention 0.25 \xE2\x86\x92 \xE2\x80\xA6");
    cairo_destroy(cr);
    cairo_surface_destroy(surface);
  } catch (const mha::FileError&) {
  }
  return 0;
}
