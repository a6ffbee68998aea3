// UTF-8 decoding and encoding and the code-point classes (\p{L}, \p{N}, \s) that the tokenizer's
// pre-tokenizers, split patterns and normalizer share. Internal to engine/tokenizer.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode_classes.hpp"

namespace mha::utf8 {

// Length of the well-formed UTF-8 character at p (n bytes available), or 0 if none starts there
// (Unicode's table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF).
inline int char_at(const unsigned char* p, std::size_t n, char32_t& cp) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  auto cont = [&](std::size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < n && p[i] >= lo && p[i] <= hi;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(1)) return 0;
    cp = char32_t(b0 & 0x1F) << 6 | (p[1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    if (!cont(1, lo, hi) || !cont(2)) return 0;
    cp = char32_t(b0 & 0x0F) << 12 | char32_t(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (!cont(1, lo, hi) || !cont(2) || !cont(3)) return 0;
    cp = char32_t(b0 & 0x07) << 18 | char32_t(p[1] & 0x3F) << 12 | char32_t(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
    return 4;
  }
  return 0;
}

inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6);
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | cp >> 12);
    out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | cp >> 18);
    out += char(0x80 | (cp >> 12 & 0x3F));
    out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

enum Class : unsigned char { kOther, kLetter, kNumber, kSpace };

template <std::size_t N>
bool in_ranges(const unicode::CodePointRange (&ranges)[N], char32_t cp) {
  const auto* it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                    [](char32_t c, const unicode::CodePointRange& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= (it - 1)->last;
}

inline Class classify_slow(char32_t cp) {
  if (in_ranges(unicode::kLetterRanges, cp)) return kLetter;
  if (in_ranges(unicode::kNumberRanges, cp)) return kNumber;
  if (in_ranges(unicode::kSpaceRanges, cp)) return kSpace;
  return kOther;
}

// Latin-1 from a table (built once from the same ranges), the rest by binary search.
inline Class classify(char32_t cp) {
  static const std::array<Class, 256> latin1 = [] {
    std::array<Class, 256> t{};
    for (char32_t c = 0; c < 256; ++c) t[c] = classify_slow(c);
    return t;
  }();
  return cp < 256 ? latin1[cp] : classify_slow(cp);
}

// Valid UTF-8 (checked by the caller) as code points, their classes and byte offsets.
struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<Class> cls;
  std::vector<std::size_t> offset;  // byte offset of each code point, plus the end
};

inline void decode_valid(std::string_view text, CodePoints& out) {
  out.cp.clear();
  out.cls.clear();
  out.offset.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    const int len = char_at(p + i, text.size() - i, cp);
    out.cp.push_back(cp);
    out.cls.push_back(classify(cp));
    out.offset.push_back(i);
    i += std::size_t(len > 0 ? len : 1);
  }
  out.offset.push_back(text.size());
}

}  // namespace mha::utf8
