// Axis labels (see labels.hpp).
#include "labels.hpp"

namespace mha::render {

int label_step(float cell, float text_extent) {
  if (!(cell > 0)) return 1;
  int step = 1;
  while (float(step) * cell < text_extent && step < (1 << 30)) step *= 2;
  return step;
}

std::string valid_utf8(std::string_view s) {
  const std::string_view replacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char b = byte(i);
    if (b < 0x80) {
      out += char(b);
      ++i;
      continue;
    }
    // The length a lead byte announces and the range its second byte must fall in (Unicode table
    // 3-7: the narrower ranges exclude overlongs, surrogates and code points past U+10FFFF).
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
      n = 2;
    else if (b == 0xE0)
      n = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC)
      n = 3;
    else if (b == 0xED)
      n = 3, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF)
      n = 3;
    else if (b == 0xF0)
      n = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      n = 4;
    else if (b == 0xF4)
      n = 4, hi = 0x8F;
    int k = 1;  // bytes of the sequence that are well-formed so far
    if (n) {
      for (; k < n && i + std::size_t(k) < s.size(); ++k) {
        const unsigned char c = byte(i + std::size_t(k));
        if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) break;
      }
    }
    if (n && k == n)
      out.append(s.substr(i, std::size_t(n)));
    else
      out.append(replacement);
    i += std::size_t(k);
  }
  return out;
}

}  // namespace mha::render
