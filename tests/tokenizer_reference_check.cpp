// Compares the C++ tokenizer with reference ids written by tools/gen_tokenizer_reference.js, id for
// id, with and without the post-processor's special tokens; also checks that decoding the ids gives
// the text back where the tokenizer has no normalizer. Prints one line a tokenizer and the first
// differences; exits 1 if any text differs. Run by tests/tokenizer_reference.cmake.
//
//   tokenizer_reference_check OUT/llama3.json OUT/qwen3.json ...
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "errors.hpp"
#include "io/tokenizer_files.hpp"

namespace {

using Ids = std::vector<std::int32_t>;

std::string shown(const mha::BpeTokenizer& tok, const Ids& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
    if (ids[i] >= 0 && ids[i] < tok.vocab_size()) out += " " + tok.display_piece(ids[i]);
  }
  return out + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tokenizer_reference_check CASES.json...\n");
    return 2;
  }
  bool all_equal = true;
  for (int a = 1; a < argc; ++a) {
    std::ifstream in(argv[a], std::ios::binary);
    const nlohmann::json doc = nlohmann::json::parse(in);
    const std::string name = doc["name"];
    const auto t0 = std::chrono::steady_clock::now();
    const mha::BpeTokenizer tok = mha::read_tokenizer_json(doc["tokenizer"].get<std::string>());
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const bool round_trips = tok.lossless();
    std::size_t equal = 0, total = 0, shown_count = 0, decoded = 0;
    for (const nlohmann::json& c : doc["cases"]) {
      const std::string text = c["text"];
      const Ids want = c["ids"], want_plain = c["ids_plain"];
      Ids got, got_plain;
      std::string error;
      try {
        got = tok.encode(text);
        got_plain = tok.encode(text, false);
      } catch (const mha::Error& e) {
        error = e.what();
      }
      ++total;
      const bool same = error.empty() && got == want && got_plain == want_plain;
      if (same) ++equal;
      if (same && tok.lossless() && tok.decode(got_plain) == text) ++decoded;
      if (!same && shown_count++ < 5)
        std::printf("%s: %s\n  reference %s\n  ours      %s\n  plain ref %s\n  ours      %s\n", name.c_str(),
                    c["text"].dump().c_str(), shown(tok, want).c_str(),
                    error.empty() ? shown(tok, got).c_str() : error.c_str(), shown(tok, want_plain).c_str(),
                    shown(tok, got_plain).c_str());
    }
    std::printf("%s: %zu of %zu texts equal the reference id for id (with and without special tokens)",
                name.c_str(), equal, total);
    if (round_trips) std::printf("; %zu decode back to their text", decoded);
    std::printf("; %lld tokens, loaded in %.0f ms\n", (long long)tok.vocab_size(), load_ms);
    if (equal != total || (round_trips && decoded != equal)) all_equal = false;
  }
  return all_equal ? 0 : 1;
}
