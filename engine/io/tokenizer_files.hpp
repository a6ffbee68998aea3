// Tokenizer files as a BpeTokenizer: GPT-2's vocab.json + merges.txt, or a Hugging Face
// tokenizer.json with a BPE model (GPT-2, SmolLM2, Llama 3, Qwen2/Qwen3: byte-level; Llama 2,
// TinyLlama, Mistral: SentencePiece's BPE over characters with byte fallback). Every file is bounded
// (a regular file of at most kMaxTokenizerFileBytes) and checked; a malformed one is a FileError
// naming the file and the line or entry, a type or option this reader does not implement a
// ConfigError whose argument is the field ("model.type", "pre_tokenizer.pretokenizers[0].type"),
// never a crash or a tokenizer that silently differs.
//
// Special tokens: a tokenizer.json's added_tokens (GPT-2's `<|endoftext|>`, Llama's <s>, any
// others); with vocab.json + merges.txt, `<|endoftext|>` when the vocab has it. BpeTokenizer::encode
// maps their literal text to their ids, as Hugging Face's tokenizers do.
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
// [left, right] pairs), byte_fallback and ignore_merges; added_tokens [{"id", "content"}] (matched
// on the raw text, lstrip / rstrip / single_word false); and, each alone or in a Sequence:
//   normalizer      NFC, Prepend, Replace (a String pattern)
//   pre_tokenizer   Split (a Regex SplitPattern reads, behavior Isolated), Digits, Metaspace,
//                   ByteLevel (last); none at all for SentencePiece's BPE
//   post_processor  ByteLevel (nothing to add), TemplateProcessing (its "single" template)
//   decoder         ByteLevel; or Metaspace, Replace(symbol -> " "), ByteFallback, Fuse, Strip
// Anything else is refused with a ConfigError naming the field and its type or value: other model
// types (Unigram, WordPiece, WordLevel), dropout, subword prefixes or suffixes, other normalizers,
// pre-tokenizers and post-processors, regex constructs SplitPattern does not implement.
BpeTokenizer read_tokenizer_json(const std::string& path);

// A model folder's tokenizer, for any family: tokenizer.json if it is there, else vocab.json +
// merges.txt. With neither, a FileError that names the folder and the files it looked for.
BpeTokenizer load_tokenizer(const std::string& folder);

// The same readers on bytes in memory; `*_name` starts every error message (tests, fuzzing).
BpeTokenizer parse_tokenizer_files(std::string_view vocab_json, std::string_view merges_txt,
                                   const std::string& vocab_name, const std::string& merges_name);
BpeTokenizer parse_tokenizer_json(std::string_view text, const std::string& name);

}  // namespace mha
