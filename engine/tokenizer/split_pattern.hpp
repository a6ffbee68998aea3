// The regular expressions of tokenizer.json `Split` pre-tokenizers (Llama 3's, Qwen2's and Qwen3's
// patterns and others built from the same pieces), matched over code points with a small
// backtracking matcher. Only the constructs those files use are understood; anything else is refused
// when the pattern is read, so no pattern is ever matched differently from what it says.
//
// Understood: alternation `|`; groups `(?:…)`, `(…)` (captures are not needed to split) and `(?i:…)`
// (ASCII letters in it match either case, as the JavaScript reference rewrites it); lookahead
// `(?!…)` and `(?=…)`; greedy quantifiers `?`, `*`, `+`, `{n}`, `{n,}`, `{n,m}` (on a group, only
// `?`); `\p{L}`, `\p{N}`, `\P{L}`, `\P{N}`, `\s`, `\S` (JavaScript's classes, unicode_classes.hpp);
// the escapes `\r`, `\n`, `\t`, `\f`, `\v` and an escaped ASCII punctuation character; classes
// `[…]` and `[^…]` of those, with ranges `a-z`; any other character as itself.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mha {

class SplitPattern {
 public:
  // Throws ConfigError (argument "pattern") naming the pattern, the construct and its byte offset.
  explicit SplitPattern(std::string pattern);

  // Splits valid UTF-8 the way a Split pre-tokenizer with behavior "Isolated" does: each match
  // (leftmost, its alternatives tried in order, as a backtracking engine does) is a piece, and so is
  // each non-empty stretch between matches. The pieces cover `text` exactly.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  const std::string& source() const { return source_; }

  struct Program;  // the parsed pattern (split_pattern.cpp)

 private:
  std::string source_;
  std::shared_ptr<const Program> program_;
};

}  // namespace mha
