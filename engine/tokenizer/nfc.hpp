// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical composition),
// the normalizer Qwen2's and Qwen3's tokenizer.json name. Tables: unicode_nfc.hpp.
#pragma once

#include <string>
#include <string_view>

namespace mha {

// NFC of valid UTF-8 (checked by the caller). Text that is all ASCII comes back unchanged.
std::string nfc(std::string_view utf8);

}  // namespace mha
