// Byte-pair-encoding tokenizers: GPT-2's byte-level BPE, and the Llama family's, held as data: the
// normalizer, the pre-tokenizer steps, byte-level or character pieces with byte fallback, and the
// special tokens the post-processor puts around a text. One rank-ordered merge loop serves them all;
// decode and a readable form of each token for axis labels. No file formats here:
// engine/io/tokenizer_files.hpp reads vocab.json + merges.txt or a Hugging Face tokenizer.json.
//
// Matches the reference encoders id for id (gpt-3-encoder for GPT-2; for tokenizer.json files the
// JavaScript port of Hugging Face's tokenizers, @lenml/tokenizers), with these documented choices:
//  * Input is UTF-8 and must be valid: invalid UTF-8 is refused with a Utf8Error naming the byte
//    offset (the reference works on UTF-16 strings, where the nearest thing, a lone surrogate,
//    becomes U+FFFD).
//  * \p{L}, \p{N} and \s are JavaScript's, from the tables in unicode_classes.hpp (their Unicode
//    version is unicode::kUnicodeVersion). Code points assigned after that version count as
//    neither letters nor numbers here, whatever the reference's runtime knows. Like the reference,
//    (?i:'s|…) folds ASCII letters only and Digits splits ASCII digits only (Hugging Face's Rust
//    library also folds U+017F to s and splits every \p{N}).
//  * encode() maps the literal text of a special token (GPT-2's `<|endoftext|>`, or a
//    tokenizer.json's added_tokens) to its id, as Hugging Face tokenizers do; encode_ordinary()
//    does not, like gpt-3-encoder.
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

// One step of a normalizer, applied in order to each stretch of text between special tokens.
struct NormalizerStep {
  enum class Kind {
    kNfc,      // Unicode NFC
    kPrepend,  // `text` before non-empty text (SentencePiece's "▁")
    kReplace,  // every `from` by `text` (" " by "▁")
  };
  Kind kind = Kind::kNfc;
  std::string text;
  std::string from;
};

// One step of a pre-tokenizer: each splits every word the steps before it made into smaller words.
// Merges never cross a word's edges.
struct PreTokenizerStep {
  enum class Kind {
    kSplit,      // `pattern` (split_pattern.hpp); its matches and the text between them are words
    kDigits,     // each ASCII digit (individual_digits) or each run of them is a word
    kMetaspace,  // spaces become `replacement`, which may be put before the text, and words split before it
    kByteLevel,  // GPT-2's: an optional leading space, GPT-2's pattern (use_regex); pieces are byte-level
  };
  Kind kind = Kind::kByteLevel;
  std::string pattern;             // kSplit
  bool individual_digits = false;  // kDigits
  std::string replacement;         // kMetaspace ("▁")
  enum class Prepend { kAlways, kFirst, kNever };
  Prepend prepend_scheme = Prepend::kAlways;  // kMetaspace: kFirst only at the start of the whole text
  bool split = true;                          // kMetaspace
  bool add_prefix_space = false;              // kByteLevel
  bool use_regex = true;                      // kByteLevel
};

// What a tokenizer is built from. The defaults are GPT-2's.
//
// Byte-level (the pre-tokenizer ends with a kByteLevel step): each character of a piece stands for
// one byte (bytes_to_unicode), so "Ġthe" is " the", and a word starts as its bytes.
// Character pieces (no kByteLevel step; SentencePiece's BPE): a piece is text ("▁the"), a word starts
// as its characters, and byte_fallback must be on: a character with no piece becomes the pieces
// "<0xNN>" of its UTF-8 bytes. `space_symbol` ("▁") decodes as a space.
//
// Special tokens are matched on their literal text before anything else and may be any non-empty
// UTF-8.
struct BpeVocab {
  std::vector<std::string> pieces;                          // pieces[id]
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order, first = applied first
  std::vector<std::int32_t> special_ids;                    // ids whose piece is matched literally

  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer = {PreTokenizerStep{}};
  bool byte_fallback = false;
  bool ignore_merges = false;  // a word that is a piece is that piece, whatever the merges would make
  std::string space_symbol;    // character pieces: the character decoded as a space
  bool decode_strips_leading_space = false;  // decode() drops one space at the start (SentencePiece)
  // The post-processor's template for one text: ids put before and after it by encode().
  std::vector<std::int32_t> prefix_ids, suffix_ids;
};

class BpeTokenizer {
 public:
  // Checks the vocab and throws ConfigError naming the entry: an empty or repeated piece, a piece
  // that stands for no bytes (a byte-level piece with a character outside bytes_to_unicode, a
  // character piece that is not UTF-8) unless special, a byte's piece missing or special (byte-level:
  // the 256 single-byte pieces; character pieces: "<0x00>".."<0xFF>"), a merge whose pieces or result
  // are not in the vocab or whose result is special, a repeated merge, a special, prefix or suffix
  // id out of range, a pattern SplitPattern refuses, steps that cannot go together (kByteLevel not
  // last, character pieces without byte_fallback). So decode(encode(text)) == text holds for
  // every tokenizer that can be built and has no normalizer.
  explicit BpeTokenizer(BpeVocab vocab);

  // Token ids of UTF-8 text; special tokens' literal text becomes their ids. With
  // add_special_tokens (Hugging Face's default) the post-processor's ids go around the text, e.g.
  // Llama 2's <s> before it. Throws Utf8Error.
  std::vector<std::int32_t> encode(std::string_view utf8, bool add_special_tokens = true) const;
  // The text alone with no special tokens: `<|endoftext|>` is ordinary text (as gpt-3-encoder
  // encodes it) and nothing is put around it.
  std::vector<std::int32_t> encode_ordinary(std::string_view utf8) const;

  // The bytes the ids stand for (special tokens as their text). Not necessarily valid UTF-8: a
  // slice of ids may end inside a character. Throws ConfigError for an id out of range.
  std::string decode(const std::vector<std::int32_t>& ids) const;

  // The vocab's string for the id ("Ġthe", "▁the", "<0x0A>"). Throws ConfigError for an id out of range.
  const std::string& piece(std::int32_t id) const;
  // The id's text for a label: " the" (GPT-2's "Ġthe", SentencePiece's "▁the") -> "␣the", "\n"
  // (and "<0x0A>") -> "↵", "\t" -> "⇥", "\r" -> "␍", other control bytes and bytes that are not whole
  // UTF-8 characters as "\xNN" (two upper-case hex digits); a special token as its text.
  std::string display_piece(std::int32_t id) const;

  std::int64_t vocab_size() const;
  std::optional<std::int32_t> token_id(std::string_view piece) const;
  bool is_special(std::int32_t id) const;
  // The id encode() puts first (the post-processor's first prefix id, Llama 2's <s>), if any.
  std::optional<std::int32_t> bos_id() const;
  // The ids encode() puts before and after a text.
  const std::vector<std::int32_t>& prefix_ids() const;
  const std::vector<std::int32_t>& suffix_ids() const;
  // Whether decode(encode(text, false)) == text for every valid text: no normalizer and no Metaspace
  // step rewrite the text (Llama 2's "▁" and NFC do).
  bool lossless() const;
  // What kind of tokenizer this is, for model-info: "byte-level BPE, 50257 tokens, 50000 merges" or
  // "SentencePiece-style BPE with byte fallback, …", with the pre-tokenizer and the ids put around a text.
  std::string describe() const;

 private:
  struct Model;
  struct Cache;
  void encode_segment(std::string_view utf8, bool at_start, std::vector<std::int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;
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
