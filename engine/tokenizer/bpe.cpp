// GPT-2 byte-level BPE: UTF-8 checking, the pre-tokenizer pattern implemented by hand over code
// points (its alternatives tried in order at each position, as the regex engine does), the merge
// loop on token ids, and decode / display. Follows OpenAI's encoder.py and its JavaScript port.
#include "tokenizer/bpe.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "tokenizer/unicode_classes.hpp"

namespace mha {

namespace {

// ---- UTF-8 ----

// Length of the well-formed UTF-8 character at p (n bytes available), or 0 if none starts there
// (Unicode's table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF).
int utf8_char(const unsigned char* p, std::size_t n, char32_t& cp) {
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

void append_utf8(std::string& out, char32_t cp) {
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

void append_hex_byte(std::string& out, unsigned char b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 15];
}

// ---- code-point classes ----

enum Class : unsigned char { kOther, kLetter, kNumber, kSpace };

template <std::size_t N>
bool in_ranges(const unicode::CodePointRange (&ranges)[N], char32_t cp) {
  const auto* it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                    [](char32_t c, const unicode::CodePointRange& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= (it - 1)->last;
}

Class classify_slow(char32_t cp) {
  if (in_ranges(unicode::kLetterRanges, cp)) return kLetter;
  if (in_ranges(unicode::kNumberRanges, cp)) return kNumber;
  if (in_ranges(unicode::kSpaceRanges, cp)) return kSpace;
  return kOther;
}

// Latin-1 from a table (built once from the same ranges), the rest by binary search.
Class classify(char32_t cp) {
  static const std::array<Class, 256> latin1 = [] {
    std::array<Class, 256> t{};
    for (char32_t c = 0; c < 256; ++c) t[c] = classify_slow(c);
    return t;
  }();
  return cp < 256 ? latin1[cp] : classify_slow(cp);
}

struct CodePoints {
  std::vector<char32_t> cp;
  std::vector<Class> cls;
  std::vector<std::size_t> offset;  // byte offset of each code point, plus the end
};

// Decodes valid UTF-8 (checked by the caller).
void decode_valid(std::string_view text, CodePoints& out) {
  out.cp.clear();
  out.cls.clear();
  out.offset.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    const int len = utf8_char(p + i, text.size() - i, cp);
    out.cp.push_back(cp);
    out.cls.push_back(classify(cp));
    out.offset.push_back(i);
    i += std::size_t(len > 0 ? len : 1);
  }
  out.offset.push_back(text.size());
}

// The pattern's match starting at code point i (there always is one: every code point is a letter,
// a number, a space or other); returns the code point just past it.
std::size_t match_at(const CodePoints& t, std::size_t i) {
  const std::size_t n = t.cp.size();
  const char32_t c = t.cp[i];
  // 's|'t|'re|'ve|'m|'ll|'d (ASCII apostrophe, lower case only)
  if (c == U'\'' && i + 1 < n) {
    const char32_t c1 = t.cp[i + 1];
    if (c1 == U's' || c1 == U't' || c1 == U'm' || c1 == U'd') return i + 2;
    if (i + 2 < n) {
      const char32_t c2 = t.cp[i + 2];
      if ((c1 == U'r' && c2 == U'e') || (c1 == U'v' && c2 == U'e') || (c1 == U'l' && c2 == U'l'))
        return i + 3;
    }
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional U+0020, then a run of one class.
  std::size_t j = i;
  if (c == U' ' && i + 1 < n && t.cls[i + 1] != kSpace) j = i + 1;
  const Class k = t.cls[j];
  if (k != kSpace) {
    while (j < n && t.cls[j] == k) ++j;
    return j;
  }
  // '\s+(?!\S)' keeps the last space of a run for the next word; at the end it takes the whole
  // run. A single space before a non-space falls through to '\s+'.
  std::size_t e = i;
  while (e < n && t.cls[e] == kSpace) ++e;
  if (e < n && e - i >= 2) return e - 1;
  return e;
}

void pretokenize_valid(std::string_view text, CodePoints& scratch, std::vector<std::string_view>& out) {
  decode_valid(text, scratch);
  std::size_t i = 0;
  while (i < scratch.cp.size()) {
    const std::size_t end = match_at(scratch, i);
    out.push_back(text.substr(scratch.offset[i], scratch.offset[end] - scratch.offset[i]));
    i = end;
  }
}

// ---- bytes_to_unicode ----

struct ByteLevel {
  std::array<std::string, 256> chars;  // byte -> UTF-8 of its stand-in character
  std::array<int, 0x144> bytes;        // stand-in code point -> byte, or -1
  ByteLevel() {
    bytes.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? char32_t(b) : char32_t(256 + n++);
      append_utf8(chars[std::size_t(b)], cp);
      bytes[cp] = b;
    }
  }
  int byte_of(char32_t cp) const { return cp < bytes.size() ? bytes[cp] : -1; }
};

const ByteLevel& byte_level() {
  static const ByteLevel table;
  return table;
}

std::string quoted(std::string_view s) {
  return "'" + std::string(s) + "'";
}

// Words up to this many bytes are cached; the cache is emptied when it reaches kCacheEntries.
constexpr std::size_t kCacheWordBytes = 128;
constexpr std::size_t kCacheEntries = 1 << 16;

}  // namespace

void check_utf8(std::string_view bytes, const std::string& argument) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t i = 0;
  while (i < bytes.size()) {
    char32_t cp = 0;
    const int len = utf8_char(p + i, bytes.size() - i, cp);
    if (len == 0) {
      std::string shown;
      for (std::size_t k = i; k < bytes.size() && k < i + 4; ++k) append_hex_byte(shown, p[k]);
      throw Utf8Error(argument,
                      argument + ": invalid UTF-8 at byte offset " + std::to_string(i) + " (" + shown +
                          (i + 4 < bytes.size() ? "..." : "") + ")",
                      i);
    }
    i += std::size_t(len);
  }
}

const std::string& byte_level_char(unsigned char byte) {
  return byte_level().chars[byte];
}

std::vector<std::string_view> pretokenize(std::string_view utf8) {
  check_utf8(utf8);
  CodePoints scratch;
  std::vector<std::string_view> out;
  pretokenize_valid(utf8, scratch, out);
  return out;
}

// ---- the tokenizer ----

struct BpeTokenizer::Model {
  struct Merge {
    std::int32_t rank;
    std::int32_t result;
  };
  std::vector<std::string> pieces;
  std::vector<std::string> bytes;  // what each id decodes to
  std::unordered_map<std::string, std::int32_t> ids;
  std::unordered_map<std::uint64_t, Merge> merges;  // (left id << 32 | right id)
  std::array<std::int32_t, 256> byte_ids{};
  std::vector<bool> special;
  std::vector<std::pair<std::string, std::int32_t>> specials;  // text, id

  const Merge* merge(std::int32_t left, std::int32_t right) const {
    if (left < 0 || right < 0) return nullptr;
    const auto it = merges.find(std::uint64_t(std::uint32_t(left)) << 32 | std::uint32_t(right));
    return it == merges.end() ? nullptr : &it->second;
  }
};

struct BpeTokenizer::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<std::int32_t>> words;
};

BpeTokenizer::BpeTokenizer(BpeVocab vocab) {
  auto m = std::make_shared<Model>();
  const std::size_t n = vocab.pieces.size();
  if (n == 0) throw ConfigError("vocab", "the vocab is empty");
  if (n > std::size_t(INT32_MAX)) throw ConfigError("vocab", "the vocab has more than 2^31 - 1 pieces");
  m->special.assign(n, false);
  for (const std::int32_t id : vocab.special_ids) {
    if (id < 0 || std::size_t(id) >= n)
      throw ConfigError("special_ids", "special token id " + std::to_string(id) + " is out of range 0.." +
                                           std::to_string(n - 1));
    m->special[std::size_t(id)] = true;
  }

  const ByteLevel& bl = byte_level();
  m->ids.reserve(n);
  m->bytes.resize(n);
  for (std::size_t id = 0; id < n; ++id) {
    const std::string& piece = vocab.pieces[id];
    const std::string where = "vocab piece " + quoted(piece) + " (id " + std::to_string(id) + ")";
    if (piece.empty()) throw ConfigError("vocab", "vocab id " + std::to_string(id) + " has an empty piece");
    const auto [it, inserted] = m->ids.emplace(piece, std::int32_t(id));
    if (!inserted)
      throw ConfigError("vocab", where + " repeats id " + std::to_string(it->second) + "'s piece");
    if (m->special[id]) {
      check_utf8(piece, "special token id " + std::to_string(id));
      m->bytes[id] = piece;
      m->specials.emplace_back(piece, std::int32_t(id));
      continue;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
    std::string& out = m->bytes[id];
    for (std::size_t i = 0; i < piece.size();) {
      char32_t cp = 0;
      const int len = utf8_char(p + i, piece.size() - i, cp);
      const int byte = len ? bl.byte_of(cp) : -1;
      if (byte < 0) {
        char hex[16];
        std::snprintf(hex, sizeof hex, "U+%04X", unsigned(cp));
        throw ConfigError("vocab", where + " has " + (len ? std::string(hex) : std::string("invalid UTF-8")) +
                                       ", which stands for no byte (not a byte-level BPE vocab?)");
      }
      out += char(byte);
      i += std::size_t(len);
    }
  }
  for (int b = 0; b < 256; ++b) {
    const std::string& piece = bl.chars[std::size_t(b)];
    const auto it = m->ids.find(piece);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", b);
    if (it == m->ids.end())
      throw ConfigError("vocab", std::string("the vocab has no piece for byte ") + hex + " (" +
                                     quoted(piece) +
                                     "); a byte-level vocab has one for each of the 256 bytes");
    if (m->special[std::size_t(it->second)])
      throw ConfigError("vocab", std::string("the piece for byte ") + hex + " (" + quoted(piece) + ", id " +
                                     std::to_string(it->second) + ") is a special token");
    m->byte_ids[std::size_t(b)] = it->second;
  }

  if (vocab.merges.size() > std::size_t(INT32_MAX)) throw ConfigError("merges", "more than 2^31 - 1 merges");
  m->merges.reserve(vocab.merges.size());
  for (std::size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const auto& [left, right] = vocab.merges[rank];
    const std::string where =
        "merge " + std::to_string(rank) + " (" + quoted(left) + " " + quoted(right) + ")";
    std::int32_t id[3];
    const std::string parts[3] = {left, right, left + right};
    for (int k = 0; k < 3; ++k) {
      const auto it = m->ids.find(parts[k]);
      if (it == m->ids.end())
        throw ConfigError("merges", where + ": " + (k == 2 ? "its result " : "") + quoted(parts[k]) +
                                        " is not in the vocab");
      id[k] = it->second;
    }
    // A special token decodes to its text, not to the bytes its pieces stand for: no merge may make one.
    if (m->special[std::size_t(id[2])])
      throw ConfigError("merges", where + ": its result is the special token id " + std::to_string(id[2]));
    const auto [it, inserted] =
        m->merges.emplace(std::uint64_t(std::uint32_t(id[0])) << 32 | std::uint32_t(id[1]),
                          Model::Merge{std::int32_t(rank), id[2]});
    if (!inserted) throw ConfigError("merges", where + " repeats merge " + std::to_string(it->second.rank));
  }
  // Longest first, so that of two specials starting at one place the longer wins.
  std::stable_sort(m->specials.begin(), m->specials.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  m->pieces = std::move(vocab.pieces);
  model_ = std::move(m);
  cache_ = std::make_shared<Cache>();
}

std::int64_t BpeTokenizer::vocab_size() const {
  return std::int64_t(model_->pieces.size());
}

std::optional<std::int32_t> BpeTokenizer::token_id(std::string_view piece) const {
  const auto it = model_->ids.find(std::string(piece));
  if (it == model_->ids.end()) return std::nullopt;
  return it->second;
}

bool BpeTokenizer::is_special(std::int32_t id) const {
  check_id(id, "id");
  return model_->special[std::size_t(id)];
}

void BpeTokenizer::check_id(std::int32_t id, const char* argument) const {
  if (id < 0 || std::size_t(id) >= model_->pieces.size())
    throw ConfigError(argument, "token id " + std::to_string(id) + " is out of range 0.." +
                                    std::to_string(model_->pieces.size() - 1));
}

const std::string& BpeTokenizer::piece(std::int32_t id) const {
  check_id(id, "id");
  return model_->pieces[std::size_t(id)];
}

std::string BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (const std::int32_t id : ids) {
    check_id(id, "ids");
    out += model_->bytes[std::size_t(id)];
  }
  return out;
}

std::string BpeTokenizer::display_piece(std::int32_t id) const {
  check_id(id, "id");
  const std::string& bytes = model_->bytes[std::size_t(id)];
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  for (std::size_t i = 0; i < bytes.size();) {
    char32_t cp = 0;
    const int len = utf8_char(p + i, bytes.size() - i, cp);
    if (len == 0) {
      append_hex_byte(out, p[i++]);
      continue;
    }
    switch (cp) {
      case U' ': out += "\u2423"; break;   // ␣
      case U'\n': out += "\u21B5"; break;  // ↵
      case U'\t': out += "\u21E5"; break;  // ⇥
      case U'\r': out += "\u240D"; break;  // ␍
      default:
        if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) {
          for (int k = 0; k < len; ++k) append_hex_byte(out, p[i + std::size_t(k)]);
        } else {
          out.append(bytes, i, std::size_t(len));
        }
    }
    i += std::size_t(len);
  }
  return out;
}

std::vector<std::int32_t> BpeTokenizer::encode_ordinary(std::string_view utf8) const {
  check_utf8(utf8);
  std::vector<std::int32_t> out;
  encode_segment(utf8, out);
  return out;
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view utf8) const {
  check_utf8(utf8);
  const auto& specials = model_->specials;
  std::vector<std::int32_t> out;
  if (specials.empty()) {
    encode_segment(utf8, out);
    return out;
  }
  // Next occurrence of each special at or after `pos` (npos: none left), found again only once
  // passed, so the text is scanned about once per special.
  std::vector<std::size_t> next(specials.size());
  for (std::size_t k = 0; k < specials.size(); ++k) next[k] = utf8.find(specials[k].first);
  std::size_t pos = 0;
  while (pos < utf8.size()) {
    std::size_t best = std::string_view::npos, which = 0;
    for (std::size_t k = 0; k < specials.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < pos) next[k] = utf8.find(specials[k].first, pos);
      if (next[k] < best) best = next[k], which = k;  // ties keep the earlier, longer one
    }
    if (best == std::string_view::npos) break;
    encode_segment(utf8.substr(pos, best - pos), out);
    out.push_back(specials[which].second);
    pos = best + specials[which].first.size();
  }
  if (pos < utf8.size()) encode_segment(utf8.substr(pos), out);
  return out;
}

void BpeTokenizer::encode_segment(std::string_view utf8, std::vector<std::int32_t>& out) const {
  if (utf8.empty()) return;
  CodePoints scratch;
  std::vector<std::string_view> words;
  pretokenize_valid(utf8, scratch, words);
  for (const std::string_view word : words) {
    if (word.size() > kCacheWordBytes) {
      encode_word(word, out);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(cache_->mutex);
      const auto it = cache_->words.find(std::string(word));
      if (it != cache_->words.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    const std::size_t start = out.size();
    encode_word(word, out);
    std::vector<std::int32_t> ids(out.begin() + std::ptrdiff_t(start), out.end());
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->words.size() >= kCacheEntries) cache_->words.clear();
    cache_->words.emplace(std::string(word), std::move(ids));
  }
}

// The merge loop of encoder.py's bpe(): while some adjacent pair is a merge, take the lowest-ranked
// one and merge every occurrence of it, left to right, then look again. Done with a heap of
// (rank, position) so a long word costs n log n: all entries of one rank are one pass, and pairs
// formed during a pass join the heap only after it, as encoder.py finds them only after the pass.
void BpeTokenizer::encode_word(std::string_view bytes, std::vector<std::int32_t>& out) const {
  const Model& m = *model_;
  const std::size_t n = bytes.size();
  if (n == 1) {
    out.push_back(m.byte_ids[static_cast<unsigned char>(bytes[0])]);
    return;
  }
  std::vector<std::int32_t> id(n);
  std::vector<std::int32_t> next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    id[i] = m.byte_ids[static_cast<unsigned char>(bytes[i])];
    next[i] = i + 1 < n ? std::int32_t(i + 1) : -1;
    prev[i] = std::int32_t(i) - 1;
  }
  struct Entry {
    std::int32_t rank, left, right;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  std::vector<Entry> formed;
  auto consider = [&](std::int32_t left, std::int32_t right, std::vector<Entry>& into) {
    if (left < 0 || right < 0) return;
    if (const Model::Merge* mg = m.merge(id[std::size_t(left)], id[std::size_t(right)]))
      into.push_back({mg->rank, left, right});
  };
  {
    std::vector<Entry> initial;
    for (std::size_t i = 0; i + 1 < n; ++i) consider(std::int32_t(i), std::int32_t(i + 1), initial);
    heap = decltype(heap)(std::greater<Entry>(), std::move(initial));
  }
  while (!heap.empty()) {
    const std::int32_t rank = heap.top().rank;
    formed.clear();
    while (!heap.empty() && heap.top().rank == rank) {
      const Entry e = heap.top();
      heap.pop();
      const std::size_t l = std::size_t(e.left), r = std::size_t(e.right);
      // Stale if either symbol was merged since: the pair there is no longer this rank's.
      if (next[l] != e.right) continue;
      const Model::Merge* mg = m.merge(id[l], id[r]);
      if (!mg || mg->rank != rank) continue;
      id[l] = mg->result;
      id[r] = -1;
      next[l] = next[r];
      if (next[r] >= 0) prev[std::size_t(next[r])] = e.left;
      consider(prev[l], e.left, formed);
      consider(e.left, next[l], formed);
    }
    for (const Entry& e : formed) heap.push(e);
  }
  for (std::int32_t i = 0; i >= 0; i = next[std::size_t(i)]) out.push_back(id[std::size_t(i)]);
}

}  // namespace mha
