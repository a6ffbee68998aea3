// libFuzzer target: the tokenizer file readers on arbitrary bytes. Bytes with a NUL are a vocab.json
// (before it) and a merges.txt (after it); bytes without one are a tokenizer.json. Each must give a
// FileError, a ConfigError (a type or option the reader refuses) or a tokenizer whose
// decode(encode(text)) is the text where it is lossless; anything else is a bug.
// Seeds: tests/fuzz/corpus/tokenizer_files/.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "errors.hpp"
#include "io/tokenizer_files.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::optional<mha::BpeTokenizer> tok;
  try {
    const std::size_t nul = bytes.find('\0');
    if (nul != std::string_view::npos)
      tok.emplace(mha::parse_tokenizer_files(bytes.substr(0, nul), bytes.substr(nul + 1), "vocab.json",
                                             "merges.txt"));
    else
      tok.emplace(mha::parse_tokenizer_json(bytes, "tokenizer.json"));
  } catch (const mha::FileError&) {
    return 0;
  } catch (const mha::ConfigError&) {
    return 0;
  }
  for (const char* text : {"Hello world", " the cat's  hat\n\n", "<|endoftext|> x", "é日😀 1,234"}) {
    const std::vector<std::int32_t> ids = tok->encode(text, false);
    if (tok->lossless() && tok->decode(ids) != text) std::abort();
  }
  for (std::int32_t id = 0; id < tok->vocab_size() && id < 1024; ++id) tok->display_piece(id);
  return 0;
}
