// Parsers for pasted tensors and typed mask cells (see text_parse.hpp). Both read only inside the
// string they are given and never throw: a bad paste is a count mismatch shown next to the button.
#include "text_parse.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace mha::studio {

namespace {

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// nan / inf / infinity in any case; anything else is a word to skip.
bool special_value(const std::string& word, float* v) {
  std::string w;
  for (char c : word) w += char(std::tolower(static_cast<unsigned char>(c)));
  if (w == "nan")
    *v = std::numeric_limits<float>::quiet_NaN();
  else if (w == "inf" || w == "infinity")
    *v = std::numeric_limits<float>::infinity();
  else
    return false;
  return true;
}

}  // namespace

std::vector<float> parse_numbers(const std::string& text) {
  std::vector<float> out;
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '\'' || c == '"') {  // quoted text: device='cuda:0'
      const std::size_t close = text.find(c, i + 1);
      i = close == std::string::npos ? n : close + 1;
      continue;
    }
    // An optional sign, then a number or a word.
    std::size_t j = i;
    float sign = 1;
    if ((c == '-' || c == '+') && j + 1 < n) {
      sign = c == '-' ? -1.0f : 1.0f;
      ++j;
    }
    const char d = text[j];
    if (std::isdigit(static_cast<unsigned char>(d)) ||
        (d == '.' && j + 1 < n && std::isdigit(static_cast<unsigned char>(text[j + 1])))) {
      // strtof needs a terminated string: copy the run of characters a number can hold.
      std::size_t k = j;
      while (k < n && (std::isalnum(static_cast<unsigned char>(text[k])) || text[k] == '.' ||
                       ((text[k] == '-' || text[k] == '+') && (text[k - 1] == 'e' || text[k - 1] == 'E'))))
        ++k;
      const std::string token = text.substr(j, k - j);
      char* end = nullptr;
      const float v = std::strtof(token.c_str(), &end);
      const std::size_t used = std::size_t(end - token.c_str());
      if (used == token.size()) out.push_back(sign * v);  // "1e5x" or "12ab" are words, not values
      i = k;
    } else if (std::isalpha(static_cast<unsigned char>(d)) || d == '_') {
      std::size_t k = j;
      while (k < n && is_word_char(text[k])) ++k;
      float v;
      if (special_value(text.substr(j, k - j), &v)) out.push_back(sign * v);
      i = k;
    } else {
      i = j > i ? j : i + 1;
    }
  }
  return out;
}

bool parse_mask_value(const std::string& text, float* value, std::string* error) {
  std::size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  const std::string t = text.substr(b, e - b);
  char* end = nullptr;
  const float v = t.empty() ? 0.0f : std::strtof(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size()) {
    *error = "not a number: type e.g. -1.5, 0 or -inf";
    return false;
  }
  if (std::isnan(v) || (std::isinf(v) && v > 0)) {
    *error = "NaN or +inf would make the whole row NaN after softmax";
    return false;
  }
  *value = v;
  return true;
}

std::string python_float_digits(float v) {
  char buf[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  std::string t = buf;
  if (t.find_first_of(".e") == std::string::npos) t += ".0";
  return t;
}

}  // namespace mha::studio
