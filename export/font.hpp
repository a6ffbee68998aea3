// Fonts for figures: a TrueType/OpenType file read with a size cap, its table directory checked
// before FreeType sees it, then handed to cairo as a font face. A bad --font (empty, truncated, a
// device, a FIFO, a folder, not a font) is a FileError naming the file, never a crash or a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

typedef struct _cairo_font_face cairo_font_face_t;

namespace mha::exporter {

constexpr std::uint64_t kMaxFontBytes = std::uint64_t(64) << 20;  // larger than any text font

// Checks that `bytes` hold an sfnt font (TrueType, OpenType/CFF, or a collection whose every font
// is one) whose table directory and every table it lists lie inside the bytes, with the tables that
// drawing text needs (cmap, head, hhea, hmtx, maxp; glyf + loca or CFF). Throws
// FileError("font", "<name>: ...") saying which check failed.
void validate_font(const unsigned char* bytes, std::size_t size, const std::string& name);

// The file at `path`: a regular file of at most kMaxFontBytes, read whole and validated.
std::vector<unsigned char> read_font_file(const std::string& path);

// A cairo font face over a validated file (face 0), owning FreeType's library, face and the bytes
// until cairo lets the face go. Copies share the face.
class FontFace {
 public:
  explicit FontFace(const std::string& path);  // throws FileError
  FontFace(const unsigned char* bytes, std::size_t size, const std::string& name);
  FontFace(const FontFace& o);
  FontFace& operator=(const FontFace& o);
  ~FontFace();

  cairo_font_face_t* cairo() const { return face_; }
  // The em size at which ascent + descent (hhea) is `px`: the "pixel height" figures are sized by.
  double em_for_line(double px) const { return px * em_per_line_; }

 private:
  void load(std::vector<unsigned char> bytes, const std::string& name);
  cairo_font_face_t* face_ = nullptr;
  double em_per_line_ = 1;
};

}  // namespace mha::exporter
