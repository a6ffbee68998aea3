// Byte-pair encoding: UTF-8 checking, GPT-2's pre-tokenizer pattern implemented by hand over code
// points (its alternatives tried in order at each position, as the regex engine does), the other
// normalizer and pre-tokenizer steps, the merge loop on token ids, byte fallback, and decode /
// display. Follows OpenAI's encoder.py and Hugging Face's tokenizers (their JavaScript port).
#include "tokenizer/bpe.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <deque>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "tokenizer/nfc.hpp"
#include "tokenizer/split_pattern.hpp"
#include "tokenizer/utf8.hpp"

namespace mha {

namespace {

using utf8::Class;
using utf8::CodePoints;
using utf8::kSpace;

void append_hex_byte(std::string& out, unsigned char b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 15];
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
  utf8::decode_valid(text, scratch);
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
      utf8::append(chars[std::size_t(b)], cp);
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
    const int len = utf8::char_at(p + i, bytes.size() - i, cp);
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
  // Byte-level: the piece of each byte. Character pieces: "<0xNN>", each byte's fallback.
  std::array<std::int32_t, 256> byte_ids{};
  std::unordered_map<char32_t, std::int32_t> char_ids;         // character pieces of one character
  std::unordered_map<std::string, std::int32_t> ids_by_bytes;  // byte-level with ignore_merges
  std::vector<bool> special;
  std::vector<std::pair<std::string, std::int32_t>> specials;  // text, id

  bool byte_level = true;
  bool ignore_merges = false;
  bool decode_strips_leading_space = false;
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<std::optional<SplitPattern>> patterns;  // of each kSplit step
  std::vector<std::int32_t> prefix_ids, suffix_ids;

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

namespace {

std::string byte_piece(int b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  return name;
}

// "<0xNN>" (upper-case hex, as SentencePiece writes it) -> NN, else -1.
int byte_of_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = piece[std::size_t(k)];
    if (c >= '0' && c <= '9')
      value = value * 16 + (c - '0');
    else if (c >= 'A' && c <= 'F')
      value = value * 16 + (c - 'A' + 10);
    else
      return -1;
  }
  return value;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

void check_range(const std::vector<std::int32_t>& ids, std::size_t n, const char* argument) {
  for (const std::int32_t id : ids)
    if (id < 0 || std::size_t(id) >= n)
      throw ConfigError(argument, std::string(argument) + ": token id " + std::to_string(id) +
                                      " is out of range 0.." + std::to_string(n - 1));
}

}  // namespace

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
  check_range(vocab.prefix_ids, n, "prefix_ids");
  check_range(vocab.suffix_ids, n, "suffix_ids");

  // The steps: a byte-level step, if any, comes last; character pieces need byte fallback.
  const auto& steps = vocab.pre_tokenizer;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const PreTokenizerStep& s = steps[i];
    m->patterns.emplace_back();
    if (s.kind == PreTokenizerStep::Kind::kByteLevel && i + 1 != steps.size())
      throw ConfigError("pre_tokenizer", "the byte-level step must be the last pre-tokenizer step");
    if (s.kind == PreTokenizerStep::Kind::kSplit) m->patterns.back().emplace(s.pattern);
    if (s.kind == PreTokenizerStep::Kind::kMetaspace && s.replacement.empty())
      throw ConfigError("pre_tokenizer", "a Metaspace step needs a replacement character");
  }
  for (const NormalizerStep& s : vocab.normalizer)
    if (s.kind == NormalizerStep::Kind::kReplace && s.from.empty())
      throw ConfigError("normalizer", "a Replace step needs a non-empty string to replace");
  m->byte_level = !steps.empty() && steps.back().kind == PreTokenizerStep::Kind::kByteLevel;
  if (m->byte_level && vocab.byte_fallback)
    throw ConfigError("byte_fallback", "byte fallback is for character pieces, not for a byte-level vocab");
  if (!m->byte_level && !vocab.byte_fallback)
    throw ConfigError("byte_fallback",
                      "a vocab of character pieces needs byte fallback, or some text would have no tokens");

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
    std::string& out = m->bytes[id];
    if (!m->byte_level) {
      check_utf8(piece, where);
      const int byte = byte_of_piece(piece);
      if (byte >= 0) {
        out = std::string(1, char(byte));
        continue;
      }
      out = piece;
      if (!vocab.space_symbol.empty()) replace_all(out, vocab.space_symbol, " ");
      char32_t cp = 0;
      const int len = utf8::char_at(reinterpret_cast<const unsigned char*>(piece.data()), piece.size(), cp);
      if (std::size_t(len) == piece.size()) m->char_ids.emplace(cp, std::int32_t(id));
      continue;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
    for (std::size_t i = 0; i < piece.size();) {
      char32_t cp = 0;
      const int len = utf8::char_at(p + i, piece.size() - i, cp);
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
    const std::string piece = m->byte_level ? bl.chars[std::size_t(b)] : byte_piece(b);
    const auto it = m->ids.find(piece);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", b);
    if (it == m->ids.end())
      throw ConfigError("vocab",
                        std::string("the vocab has no piece for byte ") + hex + " (" + quoted(piece) +
                            (m->byte_level ? "); a byte-level vocab has one for each of the 256 bytes"
                                           : "); byte fallback needs one for each of the 256 bytes"));
    if (m->special[std::size_t(it->second)])
      throw ConfigError("vocab", std::string("the piece for byte ") + hex + " (" + quoted(piece) + ", id " +
                                     std::to_string(it->second) + ") is a special token");
    m->byte_ids[std::size_t(b)] = it->second;
  }
  if (m->byte_level && vocab.ignore_merges)
    for (std::size_t id = 0; id < n; ++id)
      if (!m->special[id]) m->ids_by_bytes.emplace(m->bytes[id], std::int32_t(id));

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
  m->ignore_merges = vocab.ignore_merges;
  m->decode_strips_leading_space = vocab.decode_strips_leading_space;
  m->normalizer = std::move(vocab.normalizer);
  m->pre_tokenizer = std::move(vocab.pre_tokenizer);
  m->prefix_ids = std::move(vocab.prefix_ids);
  m->suffix_ids = std::move(vocab.suffix_ids);
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

std::optional<std::int32_t> BpeTokenizer::bos_id() const {
  if (model_->prefix_ids.empty()) return std::nullopt;
  return model_->prefix_ids.front();
}

const std::vector<std::int32_t>& BpeTokenizer::prefix_ids() const {
  return model_->prefix_ids;
}

const std::vector<std::int32_t>& BpeTokenizer::suffix_ids() const {
  return model_->suffix_ids;
}

bool BpeTokenizer::lossless() const {
  return model_->normalizer.empty() &&
         std::none_of(model_->pre_tokenizer.begin(), model_->pre_tokenizer.end(),
                      [](const PreTokenizerStep& s) { return s.kind == PreTokenizerStep::Kind::kMetaspace; });
}

std::string BpeTokenizer::describe() const {
  const Model& m = *model_;
  std::string out = m.byte_level ? "byte-level BPE" : "SentencePiece-style BPE with byte fallback";
  out += ", " + std::to_string(m.pieces.size()) + " tokens, " + std::to_string(m.merges.size()) + " merges";
  std::string split;
  for (const PreTokenizerStep& step : m.pre_tokenizer) {
    if (step.kind == PreTokenizerStep::Kind::kSplit) split = "tokenizer.json's split pattern";
    if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.use_regex && split.empty())
      split = "GPT-2's split pattern";
    if (step.kind == PreTokenizerStep::Kind::kMetaspace) split = "Metaspace (\u2581 for spaces)";
  }
  if (!split.empty()) out += ", " + split;
  if (!m.normalizer.empty()) out += ", normalized first";
  if (!m.prefix_ids.empty()) out += ", " + display_piece(m.prefix_ids.front()) + " put before every text";
  return out;
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
  if (model_->decode_strips_leading_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::string BpeTokenizer::display_piece(std::int32_t id) const {
  check_id(id, "id");
  const std::string& bytes = model_->bytes[std::size_t(id)];
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  for (std::size_t i = 0; i < bytes.size();) {
    char32_t cp = 0;
    const int len = utf8::char_at(p + i, bytes.size() - i, cp);
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
  encode_segment(utf8, true, out);
  return out;
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view utf8, bool add_special_tokens) const {
  check_utf8(utf8);
  const auto& specials = model_->specials;
  std::vector<std::int32_t> out;
  if (add_special_tokens) out = model_->prefix_ids;
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
    encode_segment(utf8.substr(pos, best - pos), pos == 0, out);
    out.push_back(specials[which].second);
    pos = best + specials[which].first.size();
  }
  if (pos < utf8.size()) encode_segment(utf8.substr(pos), pos == 0, out);
  if (add_special_tokens) out.insert(out.end(), model_->suffix_ids.begin(), model_->suffix_ids.end());
  return out;
}

// Normalizes a stretch of text between special tokens, splits it into words step by step, and
// encodes each word (through the cache). `at_start`: the stretch begins the whole text (Metaspace's
// prepend_scheme "first").
void BpeTokenizer::encode_segment(std::string_view text, bool at_start,
                                  std::vector<std::int32_t>& out) const {
  const Model& m = *model_;
  if (text.empty()) return;
  std::string normalized;
  if (!m.normalizer.empty()) {
    normalized = std::string(text);
    for (const NormalizerStep& s : m.normalizer) {
      switch (s.kind) {
        case NormalizerStep::Kind::kNfc: normalized = nfc(normalized); break;
        case NormalizerStep::Kind::kPrepend:
          if (!normalized.empty()) normalized.insert(0, s.text);
          break;
        case NormalizerStep::Kind::kReplace: replace_all(normalized, s.from, s.text); break;
      }
    }
    if (normalized.empty()) return;
    text = normalized;
  }

  std::deque<std::string> owned;  // words a step rewrote; a deque keeps their addresses
  std::vector<std::string_view> words{text}, split;
  CodePoints scratch;
  for (std::size_t k = 0; k < m.pre_tokenizer.size(); ++k) {
    const PreTokenizerStep& s = m.pre_tokenizer[k];
    split.clear();
    for (std::size_t w = 0; w < words.size(); ++w) {
      std::string_view word = words[w];
      switch (s.kind) {
        case PreTokenizerStep::Kind::kSplit: m.patterns[k]->split(word, split); break;
        case PreTokenizerStep::Kind::kDigits: {
          std::size_t i = 0;
          while (i < word.size()) {
            const bool digit = word[i] >= '0' && word[i] <= '9';
            std::size_t j = i + 1;
            if (!(digit && s.individual_digits))
              while (j < word.size() && (word[j] >= '0' && word[j] <= '9') == digit) ++j;
            split.push_back(word.substr(i, j - i));
            i = j;
          }
          break;
        }
        case PreTokenizerStep::Kind::kMetaspace: {
          std::string& r = owned.emplace_back(word);
          replace_all(r, " ", s.replacement);
          const bool prepend = s.prepend_scheme == PreTokenizerStep::Prepend::kAlways ||
                               (s.prepend_scheme == PreTokenizerStep::Prepend::kFirst && at_start && w == 0);
          if (prepend && r.compare(0, s.replacement.size(), s.replacement) != 0) r.insert(0, s.replacement);
          const std::string_view all = r;
          if (!s.split) {
            split.push_back(all);
            break;
          }
          // Each word starts at a replacement character (Hugging Face's MergedWithNext).
          std::size_t from = 0;
          for (std::size_t at = all.find(s.replacement, 1); at != std::string_view::npos;
               at = all.find(s.replacement, at + 1)) {
            if (at > from) split.push_back(all.substr(from, at - from));
            from = at;
          }
          if (from < all.size()) split.push_back(all.substr(from));
          break;
        }
        case PreTokenizerStep::Kind::kByteLevel:
          if (s.add_prefix_space && word[0] != ' ') word = owned.emplace_back(" " + std::string(word));
          if (s.use_regex)
            pretokenize_valid(word, scratch, split);
          else
            split.push_back(word);
          break;
      }
    }
    words.swap(split);
  }

  for (const std::string_view word : words) {
    if (word.empty()) continue;
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

// A word's symbols are its bytes (byte-level) or its characters (character pieces; a character
// with no piece is a symbol no merge takes, later its bytes' "<0xNN>" pieces). The merge loop is
// Hugging Face's: take the lowest-ranked adjacent pair that is a merge (the leftmost of equal
// ranks), merge it, look again. Done with a heap of (rank, position) so a long word costs n log n;
// a pair formed by a merge joins the heap at once. For GPT-2's merges this is encoder.py's loop (a
// pair formed by a merge never has a lower rank than the merge that formed its piece).
void BpeTokenizer::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  const Model& m = *model_;
  if (m.ignore_merges) {
    const auto& table = m.byte_level ? m.ids_by_bytes : m.ids;
    const auto it = table.find(std::string(word));
    if (it != table.end() && !m.special[std::size_t(it->second)]) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<std::int32_t> id;
  if (m.byte_level) {
    if (word.size() == 1) {
      out.push_back(m.byte_ids[static_cast<unsigned char>(word[0])]);
      return;
    }
    id.resize(word.size());
    for (std::size_t i = 0; i < word.size(); ++i) id[i] = m.byte_ids[static_cast<unsigned char>(word[i])];
  } else {
    const auto* p = reinterpret_cast<const unsigned char*>(word.data());
    for (std::size_t i = 0; i < word.size();) {
      char32_t cp = 0;
      const int len = utf8::char_at(p + i, word.size() - i, cp);
      const auto it = m.char_ids.find(cp);
      id.push_back(it != m.char_ids.end() ? it->second : -1 - std::int32_t(i));  // -1 - byte offset
      i += std::size_t(len > 0 ? len : 1);
    }
  }
  const std::size_t n = id.size();
  std::vector<std::int32_t> next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? std::int32_t(i + 1) : -1;
    prev[i] = std::int32_t(i) - 1;
  }
  struct Entry {
    std::int32_t rank, left, right;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Entry> initial;
  auto consider = [&](std::int32_t left, std::int32_t right, std::vector<Entry>& into) {
    if (left < 0 || right < 0) return;
    if (const Model::Merge* mg = m.merge(id[std::size_t(left)], id[std::size_t(right)]))
      into.push_back({mg->rank, left, right});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) consider(std::int32_t(i), std::int32_t(i + 1), initial);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap(std::greater<Entry>(),
                                                                           std::move(initial));
  std::vector<Entry> formed;
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const std::size_t l = std::size_t(e.left), r = std::size_t(e.right);
    // Stale if either symbol was merged since: the pair there is no longer this rank's.
    if (next[l] != e.right) continue;
    const Model::Merge* mg = m.merge(id[l], id[r]);
    if (!mg || mg->rank != e.rank) continue;
    id[l] = mg->result;
    id[r] = -1;
    next[l] = next[r];
    if (next[r] >= 0) prev[std::size_t(next[r])] = e.left;
    formed.clear();
    consider(prev[l], e.left, formed);
    consider(e.left, next[l], formed);
    for (const Entry& f : formed) heap.push(f);
  }
  for (std::int32_t i = 0; i >= 0; i = next[std::size_t(i)]) {
    const std::int32_t sym = id[std::size_t(i)];
    if (sym >= 0) {
      out.push_back(sym);
      continue;
    }
    // A character with no piece: its UTF-8 bytes' fallback pieces.
    const std::size_t at = std::size_t(-1 - sym);
    char32_t cp = 0;
    const int len =
        utf8::char_at(reinterpret_cast<const unsigned char*>(word.data()) + at, word.size() - at, cp);
    for (int k = 0; k < std::max(len, 1); ++k)
      out.push_back(m.byte_ids[static_cast<unsigned char>(word[at + std::size_t(k)])]);
  }
}

}  // namespace mha
