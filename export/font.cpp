// Font files for figures (see font.hpp). The checks here are what FreeType would otherwise find out
// by reading past the end of a short or lying file; after them FreeType parses the tables themselves.
#include "font.hpp"

#include <cairo-ft.h>
#include <ft2build.h>
#include FT_FREETYPE_H
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "errors.hpp"
#include "io/npy.hpp"

namespace mha::exporter {

namespace {

constexpr std::uint32_t kMaxTables = 1024;  // real fonts list 10 to 40
constexpr std::uint32_t kMaxFaces = 256;    // fonts in one collection (.ttc)

std::uint32_t be32(const unsigned char* p) {
  return std::uint32_t(p[0]) << 24 | std::uint32_t(p[1]) << 16 | std::uint32_t(p[2]) << 8 | p[3];
}
std::uint16_t be16(const unsigned char* p) {
  return std::uint16_t(p[0] << 8 | p[1]);
}
constexpr std::uint32_t tag(const char (&s)[5]) {
  return std::uint32_t(std::uint8_t(s[0])) << 24 | std::uint32_t(std::uint8_t(s[1])) << 16 |
         std::uint32_t(std::uint8_t(s[2])) << 8 | std::uint8_t(s[3]);
}
std::string tag_name(std::uint32_t t) {
  std::string s;
  for (int sh = 24; sh >= 0; sh -= 8) {
    const char c = char((t >> sh) & 0xFF);
    s += c >= 0x20 && c < 0x7F ? c : '?';
  }
  return "'" + s + "'";
}

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  throw FileError("font", name + ": not a usable font: " + why);
}

// One font's offset table and table directory, starting at `at` (< size).
void validate_sfnt(const unsigned char* b, std::size_t size, std::size_t at, const std::string& name) {
  if (size - at < 12) bad(name, "the table directory is cut short");
  const std::uint32_t version = be32(b + at);
  if (version != 0x00010000 && version != tag("true") && version != tag("OTTO"))
    bad(name, "unknown sfnt version " + tag_name(version) + " (expected TrueType or OpenType)");
  const std::uint32_t n = be16(b + at + 4);
  if (n == 0 || n > kMaxTables) bad(name, "the table directory lists " + std::to_string(n) + " tables");
  if ((size - at - 12) / 16 < n) bad(name, "the table directory runs past the end of the file");
  struct Need {
    std::uint32_t tag;
    std::uint32_t min_length;  // what the fixed part of the table takes
    bool found;
  } need[] = {{tag("cmap"), 4, false}, {tag("head"), 54, false}, {tag("hhea"), 36, false},
              {tag("hmtx"), 0, false}, {tag("maxp"), 6, false},  {tag("glyf"), 0, false},
              {tag("loca"), 0, false}, {tag("CFF "), 0, false},  {tag("CFF2"), 0, false}};
  for (std::uint32_t i = 0; i < n; ++i) {
    const unsigned char* rec = b + at + 12 + 16 * std::size_t(i);
    const std::uint32_t t = be32(rec), offset = be32(rec + 8), length = be32(rec + 12);
    if (std::uint64_t(offset) + length > size)
      bad(name, "table " + tag_name(t) + " (offset " + std::to_string(offset) + ", length " +
                    std::to_string(length) + ") lies outside the file's " + std::to_string(size) + " bytes");
    for (Need& k : need)
      if (k.tag == t) {
        if (length < k.min_length)
          bad(name, "table " + tag_name(t) + " is " + std::to_string(length) + " bytes, shorter than " +
                        std::to_string(k.min_length));
        k.found = true;
      }
  }
  for (int k = 0; k < 5; ++k)
    if (!need[k].found) bad(name, "it has no " + tag_name(need[k].tag) + " table");
  const bool truetype = need[5].found && need[6].found, cff = need[7].found || need[8].found;
  if (!truetype && !cff) bad(name, "it has no outlines (neither 'glyf' with 'loca' nor 'CFF ')");
}

// Owned by the cairo font face (its user data): freed when cairo lets the face go.
struct FreeTypeFace {
  std::vector<unsigned char> bytes;  // FreeType reads the face from these for its whole life
  FT_Library library = nullptr;
  FT_Face face = nullptr;
  ~FreeTypeFace() {
    if (face) FT_Done_Face(face);
    if (library) FT_Done_FreeType(library);
  }
};
const cairo_user_data_key_t kOwnerKey{};

}  // namespace

void validate_font(const unsigned char* b, std::size_t size, const std::string& name) {
  if (size == 0) bad(name, "the file is empty");
  if (size > kMaxFontBytes)
    bad(name, "it is " + std::to_string(size) + " bytes, more than the " +
                  std::to_string(kMaxFontBytes >> 20) + " MiB a font file may have");
  if (size < 12) bad(name, "it is " + std::to_string(size) + " bytes, shorter than a font's header");
  if (be32(b) != tag("ttcf")) return validate_sfnt(b, size, 0, name);
  const std::uint32_t faces = be32(b + 8);
  if (faces == 0 || faces > kMaxFaces) bad(name, "the collection lists " + std::to_string(faces) + " fonts");
  if ((size - 12) / 4 < faces) bad(name, "the collection's font list runs past the end of the file");
  for (std::uint32_t i = 0; i < faces; ++i) {
    const std::uint32_t at = be32(b + 12 + 4 * std::size_t(i));
    if (at >= size)
      bad(name, "font " + std::to_string(i) + " of the collection starts past the end of the file");
    validate_sfnt(b, size, at, name);
  }
}

std::vector<unsigned char> read_font_file(const std::string& path) {
  std::uint64_t size = 0;
  int fd = -1;
  try {
    fd = open_regular_file(path, &size);  // a folder, FIFO or device: refused without blocking
  } catch (const FileError& e) {
    throw FileError("font", std::string("font ") + e.what());
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (size == 0) bad(path, "the file is empty");
  if (size > kMaxFontBytes)
    bad(path, "it is " + std::to_string(size) + " bytes, more than the " +
                  std::to_string(kMaxFontBytes >> 20) + " MiB a font file may have");
  std::vector<unsigned char> bytes(size);
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, bytes.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw FileError("font", path + ": cannot read: " + std::strerror(errno));
    if (n == 0) bad(path, "the file shrank while it was read");
    got += std::size_t(n);
  }
  validate_font(bytes.data(), bytes.size(), path);
  return bytes;
}

FontFace::FontFace(const std::string& path) {
  load(read_font_file(path), path);
}

FontFace::FontFace(const unsigned char* bytes, std::size_t size, const std::string& name) {
  validate_font(bytes, size, name);
  load(std::vector<unsigned char>(bytes, bytes + size), name);
}

FontFace::FontFace(const FontFace& o)
    : face_(cairo_font_face_reference(o.face_)), em_per_line_(o.em_per_line_) {}

FontFace& FontFace::operator=(const FontFace& o) {
  if (this != &o) {
    cairo_font_face_t* f = cairo_font_face_reference(o.face_);
    cairo_font_face_destroy(face_);
    face_ = f;
    em_per_line_ = o.em_per_line_;
  }
  return *this;
}

FontFace::~FontFace() {
  cairo_font_face_destroy(face_);
}

void FontFace::load(std::vector<unsigned char> bytes, const std::string& name) {
  auto owner = std::make_unique<FreeTypeFace>();
  owner->bytes = std::move(bytes);
  if (FT_Init_FreeType(&owner->library) != 0) throw FileError("font", name + ": FreeType did not start");
  if (const FT_Error e = FT_New_Memory_Face(owner->library, owner->bytes.data(), FT_Long(owner->bytes.size()),
                                            0, &owner->face))
    bad(name,
        std::string("FreeType cannot open it (") + (FT_Error_String(e) ? FT_Error_String(e) : "error") + ")");
  const FT_Face f = owner->face;
  if (!FT_IS_SCALABLE(f)) bad(name, "it has no scalable outlines");
  if (FT_Select_Charmap(f, FT_ENCODING_UNICODE) != 0) bad(name, "it has no Unicode character map");
  const double line_units = double(f->ascender) - double(f->descender);
  if (f->units_per_EM == 0 || line_units <= 0) bad(name, "its ascent and descent are not positive");
  em_per_line_ = double(f->units_per_EM) / line_units;
  if (!(em_per_line_ > 0.05 && em_per_line_ < 20))
    bad(name, "its ascent and descent are out of proportion to its em square");

  // No hinting: glyph shapes and advances depend on the font alone, not on the machine's settings.
  cairo_font_face_t* face = cairo_ft_font_face_create_for_ft_face(f, FT_LOAD_NO_HINTING);
  if (cairo_font_face_status(face) != CAIRO_STATUS_SUCCESS) {
    cairo_font_face_destroy(face);
    bad(name, "cairo cannot use it");
  }
  if (cairo_font_face_set_user_data(face, &kOwnerKey, owner.get(), [](void* p) {
        delete static_cast<FreeTypeFace*>(p);
      }) != CAIRO_STATUS_SUCCESS) {
    cairo_font_face_destroy(face);
    throw FileError("font", name + ": out of memory");
  }
  owner.release();  // cairo frees it with the face
  face_ = face;
}

}  // namespace mha::exporter
