// libFuzzer target: GPT-2's tokenizer on arbitrary bytes. Valid UTF-8 must encode, with and without
// special tokens, to ids that decode to exactly the input, with pre-tokenizer words that cover it and
// labels that are valid UTF-8; invalid UTF-8 must be a Utf8Error at an offset inside the input.
// Anything else (a crash, a sanitizer report, another exception) is a bug. Seeds: corpus/tokenizer/.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "errors.hpp"
#include "io/tokenizer_files.hpp"
#include "tokenizer/bpe.hpp"

namespace {

const mha::BpeTokenizer& gpt2() {
  static const mha::BpeTokenizer tok = mha::read_tokenizer_files(
      MHA_TEST_DATA_DIR "/gpt2_tokenizer/vocab.json", MHA_TEST_DATA_DIR "/gpt2_tokenizer/merges.txt");
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const mha::BpeTokenizer& tok = gpt2();
  std::vector<std::int32_t> ids;
  try {
    ids = tok.encode(text);
  } catch (const mha::Utf8Error& e) {
    if (e.byte_offset >= size) std::abort();
    try {
      tok.encode_ordinary(text);
      std::abort();  // one refused and the other not
    } catch (const mha::Utf8Error& again) {
      if (again.byte_offset != e.byte_offset) std::abort();
    }
    return 0;
  }
  if (tok.decode(ids) != text) std::abort();
  const std::vector<std::int32_t> ordinary = tok.encode_ordinary(text);
  if (tok.decode(ordinary) != text) std::abort();
  if (text.find("<|endoftext|>") == std::string_view::npos && ordinary != ids) std::abort();
  std::string joined;
  for (const std::string_view word : mha::pretokenize(text)) {
    if (word.empty()) std::abort();
    joined += word;
  }
  if (joined != text) std::abort();
  for (const std::int32_t id : ids) mha::check_utf8(tok.display_piece(id));  // throws (a bug) if not UTF-8
  return 0;
}
