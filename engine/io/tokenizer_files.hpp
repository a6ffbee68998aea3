// Tokenizer files as a BpeTokenizer: GPT-2's vocab.json + merges.txt, or a Hugging Face
// tokenizer.json with a byte-level BPE model. Every file is bounded (a regular file of at most
// kMaxTokenizerFileBytes) and checked; a bad one is a FileError naming the file and the line or
// entry, never a crash or a tokenizer that silently differs.
//
// Special tokens: a tokenizer.json's added_tokens (GPT-2's `<|endoftext|>`, any others); with
// vocab.json + merges.txt, `<|endoftext|>` when the vocab has it. BpeTokenizer::encode maps their
// literal text to their ids, as Hugging Face's tokenizers do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/bpe.hpp"

namespace mha {

inline constexpr std::uint64_t kMaxTokenizerFileBytes = 64ull << 20;

// vocab.json: one JSON object {"piece": id}, ids 0..N-1 each used once. merges.txt: an optional
// first line "#version...", then one merge "left right" per line in rank order (a final newline
// and CRLF line ends are accepted).
BpeTokenizer read_tokenizer_files(const std::string& vocab_json_path, const std::string& merges_txt_path);

// tokenizer.json: model.type "BPE" with model.vocab and model.merges ("left right" strings or
// [left, right] pairs), no normalizer, a ByteLevel pre_tokenizer without add_prefix_space, and
// added_tokens [{"id", "content"}]. Options that would tokenize differently from GPT-2 (dropout,
// subword prefixes or suffixes, byte_fallback, ignore_merges, another pre-tokenizer) are refused,
// naming the field. Not applied: lstrip / rstrip / single_word on added tokens, and the
// post_processor (GPT-2's only trims offsets; others may add tokens such as <s>).
BpeTokenizer read_tokenizer_json(const std::string& path);

// A model folder's tokenizer: tokenizer.json if it is there, else vocab.json + merges.txt. With
// neither, a FileError that names the folder and the files it looked for.
BpeTokenizer load_tokenizer(const std::string& folder);

// The same readers on bytes in memory; `*_name` starts every error message (tests, fuzzing).
BpeTokenizer parse_tokenizer_files(std::string_view vocab_json, std::string_view merges_txt,
                                   const std::string& vocab_name, const std::string& merges_name);
BpeTokenizer parse_tokenizer_json(std::string_view text, const std::string& name);

}  // namespace mha
