// NFC as UAX #15 describes it: decompose each code point fully (Hangul syllables by arithmetic),
// sort each run of non-starters by combining class (stable), then compose each character with the
// last starter unless a character between them blocks it.
#include "tokenizer/nfc.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/unicode_nfc.hpp"
#include "tokenizer/utf8.hpp"

namespace mha {

namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;
constexpr char32_t kNone = 0xFFFFFFFF;

int combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto& t = unicode::kCombiningClasses;
  const auto* it =
      std::upper_bound(std::begin(t), std::end(t), cp,
                       [](char32_t c, const unicode::CombiningClassRange& r) { return c < r.first; });
  return it != std::begin(t) && cp <= (it - 1)->last ? (it - 1)->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + s % kNCount / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto& t = unicode::kDecompositions;
  const auto* it = std::lower_bound(std::begin(t), std::end(t), cp,
                                    [](const unicode::Decomposition& d, char32_t c) { return d.cp < c; });
  if (it == std::end(t) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), unicode::kDecompositionData + it->start,
             unicode::kDecompositionData + it->start + it->length);
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& t = unicode::kCompositions;
  const auto* it =
      std::lower_bound(std::begin(t), std::end(t), std::pair(a, b),
                       [](const unicode::Composition& c, const std::pair<char32_t, char32_t>& k) {
                         return c.first != k.first ? c.first < k.first : c.second < k.second;
                       });
  return it != std::end(t) && it->first == a && it->second == b ? it->composite : kNone;
}

}  // namespace

std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);
  std::vector<char32_t> d;
  d.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const int len = utf8::char_at(p + i, text.size() - i, cp);
    decompose(cp, d);
    i += std::size_t(len > 0 ? len : 1);
  }
  std::vector<int> ccc(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) ccc[i] = combining_class(d[i]);
  // Canonical ordering: a stable insertion sort inside each run of non-starters.
  for (std::size_t i = 1; i < d.size(); ++i) {
    for (std::size_t j = i; j > 0 && ccc[j] != 0 && ccc[j - 1] > ccc[j]; --j) {
      std::swap(d[j], d[j - 1]);
      std::swap(ccc[j], ccc[j - 1]);
    }
  }
  // Canonical composition (UAX #15's reference loop). last_class 0 means the last kept character is
  // the starter itself; 256 stands for "blocked from the start" when the text opens with a non-starter.
  std::size_t kept = 0;
  if (!d.empty()) {
    std::size_t starter = 0;
    int last_class = ccc[0] == 0 ? 0 : 256;
    kept = 1;
    for (std::size_t i = 1; i < d.size(); ++i) {
      const char32_t ch = d[i];
      const int cls = ccc[i];
      const char32_t composite = last_class == 256 ? kNone : compose(d[starter], ch);
      if (composite != kNone && (last_class < cls || last_class == 0)) {
        d[starter] = composite;
        continue;
      }
      if (cls == 0) starter = kept;
      last_class = cls;
      d[kept++] = ch;
    }
  }
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < kept; ++i) utf8::append(out, d[i]);
  return out;
}

}  // namespace mha
