// Text the user types or pastes into the app: a numpy/torch printout of a tensor ("Use pasted
// query") and one mask cell's value (the mask editor's popup). No ImGui, so both can be fuzzed.
#pragma once

#include <string>
#include <vector>

namespace mha::studio {

// Every number of a numpy/torch printout, in order: "tensor([[0.88, -inf], [nan, 1e-3]])".
// Words (tensor, dtype=torch.float32, grad_fn=<AddBackward0>) and quoted text ('cuda:0') are
// skipped, so their digits are not taken as values; nan, inf and -inf are values.
std::vector<float> parse_numbers(const std::string& text);

// One mask cell as typed: a finite number or -inf, spaces around allowed. Returns false with
// `error` set ("not a number: ...", or why NaN/+inf are refused) and leaves `value` alone.
bool parse_mask_value(const std::string& text, float* value, std::string* error);

// A finite float as Python reads it back exactly: the shortest %g of 6 to 9 digits that does, with
// ".0" where it would read as an integer ("0.5", "3.0", "1e-07"). Callers spell NaN and inf.
std::string python_float_digits(float v);

}  // namespace mha::studio
