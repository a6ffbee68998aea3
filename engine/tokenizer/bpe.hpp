// GPT-2's byte-level BPE tokenizer: the pre-tokenizer pattern, bytes_to_unicode, the rank-ordered
// merge loop, decode, and a readable form of each token for axis labels. No file formats here:
// engine/io/tokenizer_files.hpp reads vocab.json + merges.txt or a Hugging Face tokenizer.json.
//
// Matches the reference encoder (gpt-3-encoder, OpenAI's encoder.py ported to JavaScript) id for
// id, with these documented choices:
//  * Input is UTF-8 and must be valid: invalid UTF-8 is refused with a Utf8Error naming the byte
//    offset (the reference works on UTF-16 strings, where the nearest thing, a lone surrogate,
//    becomes U+FFFD).
//  * \p{L}, \p{N} and \s are JavaScript's, from the tables in unicode_classes.hpp (their Unicode
//    version is unicode::kUnicodeVersion). Code points assigned after that version count as
//    neither letters nor numbers here, whatever the reference's runtime knows.
//  * encode() maps the literal text of a special token (GPT-2's `<|endoftext|>`, or a
//    tokenizer.json's added_tokens) to its id, as Hugging Face tokenizers do; encode_ordinary()
//    does not, like the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "errors.hpp"

namespace mha {

// Text that is not valid UTF-8 (a stray continuation byte, a truncated or overlong sequence, a
// surrogate, a code point past U+10FFFF). `byte_offset` is where the bad sequence starts.
struct Utf8Error : Error {
  std::size_t byte_offset;
  Utf8Error(std::string argument_, const std::string& message, std::size_t offset)
      : Error(std::move(argument_), message), byte_offset(offset) {}
};

// What a tokenizer is built from. Byte-level pieces: each character stands for one byte
// (bytes_to_unicode), so "Ġthe" is " the". Special tokens are matched on their literal text and
// may be any non-empty UTF-8.
struct BpeVocab {
  std::vector<std::string> pieces;                          // pieces[id]
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order, first = applied first
  std::vector<std::int32_t> special_ids;                    // ids whose piece is matched literally
};

class BpeTokenizer {
 public:
  // Checks the vocab and throws ConfigError naming the entry: an empty or repeated piece, a piece
  // with a character that stands for no byte (unless special), one of the 256 single-byte pieces
  // missing or special, a merge whose pieces or result are not in the vocab or whose result is
  // special, a repeated merge, a special id out of range. So decode(encode(text)) == text holds
  // for every tokenizer that can be built.
  explicit BpeTokenizer(BpeVocab vocab);

  // Token ids of UTF-8 text; special tokens' literal text becomes their ids. Throws Utf8Error.
  std::vector<std::int32_t> encode(std::string_view utf8) const;
  // The same with no special tokens: `<|endoftext|>` is ordinary text (as the reference encodes it).
  std::vector<std::int32_t> encode_ordinary(std::string_view utf8) const;

  // The bytes the ids stand for (special tokens as their text). Not necessarily valid UTF-8: a
  // slice of ids may end inside a character. decode(encode(text)) == text for any valid text.
  // Throws ConfigError for an id out of range.
  std::string decode(const std::vector<std::int32_t>& ids) const;

  // The vocab's string for the id ("Ġthe"). Throws ConfigError for an id out of range.
  const std::string& piece(std::int32_t id) const;
  // The id's text for a label: " the" -> "␣the", "\n" -> "↵", "\t" -> "⇥", "\r" -> "␍", other
  // control bytes and bytes that are not whole UTF-8 characters as "\xNN" (two upper-case hex
  // digits); a special token as its text.
  std::string display_piece(std::int32_t id) const;

  std::int64_t vocab_size() const;
  std::optional<std::int32_t> token_id(std::string_view piece) const;
  bool is_special(std::int32_t id) const;

 private:
  struct Model;
  struct Cache;
  void encode_segment(std::string_view utf8, std::vector<std::int32_t>& out) const;
  void encode_word(std::string_view bytes, std::vector<std::int32_t>& out) const;
  void check_id(std::int32_t id, const char* argument) const;
  std::shared_ptr<const Model> model_;
  std::shared_ptr<Cache> cache_;  // shared by copies; guarded by its own mutex
};

// The pre-tokenizer alone: the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched repeatedly over the code points, as views into `utf8` that cover it exactly.
// Throws Utf8Error.
std::vector<std::string_view> pretokenize(std::string_view utf8);

// Throws Utf8Error for the first invalid sequence; `argument` names the text in the message.
void check_utf8(std::string_view bytes, const std::string& argument = "text");

// bytes_to_unicode: the character (as UTF-8) that stands for each byte in a byte-level piece.
const std::string& byte_level_char(unsigned char byte);

}  // namespace mha
