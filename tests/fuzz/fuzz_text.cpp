// libFuzzer target: the text a user types into the app. The pasted-tensor parser (any printout
// gives finite-count output and never reads past the string) and the mask cell parser (accepts
// only finite values and -inf, exactly what it reports).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "text_parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<float> values = mha::studio::parse_numbers(text);
  if (values.size() > text.size()) std::abort();  // each value takes at least one character
  float v = 12345.0f;
  std::string error;
  if (mha::studio::parse_mask_value(text, &v, &error)) {
    if (std::isnan(v) || v == INFINITY || !error.empty()) std::abort();
  } else if (error.empty() || v != 12345.0f) {
    std::abort();
  }
  return 0;
}
