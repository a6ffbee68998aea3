// Tests of the Llama-family tokenizer pieces that need no network: SentencePiece's BPE with byte
// fallback on a small hand-made tokenizer.json (tests/data/tokenizers/), the split patterns of Llama 3
// and Qwen2/Qwen3, NFC, Metaspace, Digits, ignore_merges, the post-processor's template, and every
// refusal with the field it names. The real files are compared with the reference encoders by the
// ctest test tokenizer_reference_npm.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "errors.hpp"
#include "io/tokenizer_files.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/nfc.hpp"
#include "tokenizer/split_pattern.hpp"

using mha::BpeTokenizer;
using mha::ConfigError;
using nlohmann::json;
using Ids = std::vector<std::int32_t>;
using Words = std::vector<std::string>;

namespace {

const std::string kData = std::string(MHA_TEST_DATA_DIR) + "/tokenizers/";
const std::string kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const std::string kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

// Ids of the hand-made SentencePiece vocab: <unk> <s> </s>, "<0x00>".."<0xFF>" (3..258), then pieces.
constexpr std::int32_t kBos = 1, kSpace = 259, kThe = 265, kCat = 270;
std::int32_t byte_id(int b) {
  return 3 + b;
}

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return json::parse(in);
}

BpeTokenizer from(const json& doc) {
  return mha::parse_tokenizer_json(doc.dump(), "tokenizer.json");
}

Words split(const std::string& pattern, const std::string& text) {
  std::vector<std::string_view> out;
  mha::SplitPattern(pattern).split(text, out);
  return Words(out.begin(), out.end());
}

// The ConfigError f throws: its argument and message.
template <class F>
std::pair<std::string, std::string> config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return {e.argument, e.what()};
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("tokenizer: SentencePiece BPE with byte fallback, from a tokenizer.json", "[tokenizer]") {
  const BpeTokenizer tok = mha::read_tokenizer_json(kData + "sentencepiece_byte_fallback.json");
  // "▁the▁cat": merges over the whole text by rank, <s> first as the template says.
  CHECK(tok.encode("the cat") == Ids{kBos, kThe, kCat});
  CHECK(tok.encode("the cat", false) == Ids{kThe, kCat});
  CHECK(tok.encode_ordinary("the cat") == Ids{kThe, kCat});
  CHECK(tok.bos_id() == kBos);
  CHECK(tok.prefix_ids() == Ids{kBos});
  CHECK(tok.suffix_ids().empty());
  // A character with no piece becomes its UTF-8 bytes' <0xNN> pieces.
  CHECK(tok.encode("the 日", false) == Ids{kThe, kSpace, byte_id(0xE6), byte_id(0x97), byte_id(0xA5)});
  CHECK(tok.encode("\n", false) == Ids{kSpace, byte_id('\n')});
  // Special tokens' text splits the text; each stretch is normalized on its own (a "▁" each).
  CHECK(tok.encode("the<s>cat", false) == Ids{kThe, kBos, kCat});
  CHECK(tok.encode("", true) == Ids{kBos});
  CHECK(tok.encode("", false).empty());
  // Decode reverses the normalizer: "▁" is a space, the first one dropped; byte pieces are bytes.
  CHECK(tok.decode({kThe, kCat}) == "the cat");
  CHECK(tok.decode(tok.encode("the 日\n", false)) == "the 日\n");
  CHECK(tok.decode({kBos, kThe}) == "<s> the");
  // Labels: "▁the" -> "␣the", "<0x0A>" -> "↵", a lone byte of a character as \xNN.
  CHECK(tok.display_piece(kThe) == "\u2423the");
  CHECK(tok.display_piece(byte_id('\n')) == "\u21B5");
  CHECK(tok.display_piece(byte_id(0xE6)) == "\\xE6");
  CHECK(tok.display_piece(kBos) == "<s>");
  CHECK(tok.piece(kThe) == "\u2581the");
  CHECK(tok.vocab_size() == 271);
  CHECK_FALSE(tok.lossless());  // a "▁" in the text decodes as a space
}

TEST_CASE("tokenizer: the Metaspace pre-tokenizer and its prepend schemes", "[tokenizer]") {
  json doc = read_json(kData + "sentencepiece_byte_fallback.json");
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", false}};
  doc["decoder"] = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", false}};
  CHECK(from(doc).encode("the cat", false) == Ids{kThe, kCat});
  CHECK(from(doc).encode(" the", false) == Ids{kThe});  // already starts with "▁": nothing put before it
  CHECK(from(doc).decode({kThe, kCat}) == "the cat");
  // split: each word starts at a "▁", so no merge crosses one. A merge "e ▁" ranked first shows it.
  doc["model"]["vocab"]["e\u2581"] = 271;
  doc["model"]["merges"].insert(doc["model"]["merges"].begin(), "e \u2581");
  CHECK(from(doc).encode("the cat", false) == Ids{263, 261, 271, 267, 268});  // "▁t" "h" "e▁" "c" "at"
  doc["pre_tokenizer"]["split"] = true;
  CHECK(from(doc).encode("the cat", false) == Ids{kThe, kCat});
  // "first": only the text's first stretch gets the "▁", not the one after a special token.
  doc["pre_tokenizer"]["prepend_scheme"] = "first";
  CHECK(from(doc).encode("the<s>the", false) == Ids{kThe, kBos, 260, 264});
  doc["pre_tokenizer"]["prepend_scheme"] = "never";
  CHECK(from(doc).encode("the", false) == Ids{260, 264});
}

TEST_CASE("tokenizer: Llama 3's and Qwen2's split patterns", "[tokenizer]") {
  CHECK(split(kLlama3, "I'M 12345 ok!!\n\n  x") ==
        Words{"I", "'M", " ", "123", "45", " ok", "!!\n\n", " ", " x"});
  CHECK(split(kQwen2, "I'M 12345 ok") == Words{"I", "'M", " ", "1", "2", "3", "4", "5", " ok"});
  CHECK(split(kLlama3, "it's IT'S It'Ll") == Words{"it", "'s", " IT", "'S", " It", "'Ll"});
  CHECK(split(kLlama3, "\"hello\" world") == Words{"\"hello", "\"", " world"});
  CHECK(split(kLlama3, "a \n\n b") == Words{"a", " \n\n", " b"});
  CHECK(split(kLlama3, "x   ") == Words{"x", "   "});
  CHECK(split(kLlama3, "日本語 😀😀") == Words{"日本語", " 😀😀"});
  CHECK(split(kLlama3, "").empty());
  // The pieces always cover the text, matched or not.
  CHECK(split("a+", "bab") == Words{"b", "a", "b"});
  CHECK(split("[a-c]{2}|x(?=y)", "abcxyxz") == Words{"ab", "c", "x", "yxz"});
}

TEST_CASE("tokenizer: a split pattern with a construct it does not implement is refused by name",
          "[tokenizer]") {
  const auto refused = [](const std::string& pattern) {
    return config_error([&] { mha::SplitPattern{pattern}; });
  };
  CHECK(refused("\\d+") ==
        std::pair<std::string, std::string>{
            "pattern", "the split pattern '\\d+' has the escape '\\d' at byte 0, which is not supported"});
  CHECK(refused("(?<=a)b").second ==
        "the split pattern '(?<=a)b' has the group '(?<' at byte 0, which is not supported");
  CHECK(refused("a.b").second == "the split pattern 'a.b' has '.' at byte 1, which is not supported");
  CHECK(refused("[\\p{Lu}]").second ==
        "the split pattern '[\\p{Lu}]' has the class '\\p{Lu}' (only \\p{L}, \\p{N}, \\P{L} and \\P{N} are) "
        "at byte 1, "
        "which is not supported");
  CHECK(refused("a+?").second ==
        "the split pattern 'a+?' has a lazy or possessive quantifier at byte 2, which is not supported");
  CHECK(refused("(ab)+").second ==
        "the split pattern '(ab)+' has a quantifier other than '?' on a group at byte 4, which is not "
        "supported");
  CHECK(refused("a*|b").second ==
        "the split pattern 'a*|b' has alternatives that can match the empty string at byte 0, which is not "
        "supported");
  CHECK(refused("(a").second ==
        "the split pattern '(a' has a '(' that is never closed at byte 0, which is not supported");
  CHECK(refused("a)").second ==
        "the split pattern 'a)' has an unmatched ')' at byte 1, which is not supported");
  CHECK(refused("(?i:é)").second ==
        "the split pattern '(?i:é)' has a non-ASCII letter in a case-insensitive group at byte 4, which is "
        "not supported");
}

TEST_CASE("tokenizer: NFC composes, orders marks and leaves exclusions decomposed", "[tokenizer]") {
  CHECK(mha::nfc("cafe\u0301") == "caf\u00E9");
  CHECK(mha::nfc("A\u030A") == "\u00C5");
  CHECK(mha::nfc("\u212B") == "\u00C5");                // Angstrom sign: a singleton
  CHECK(mha::nfc("o\u0308\u0304") == "\u022B");         // two steps
  CHECK(mha::nfc("q\u0307\u0323") == "q\u0323\u0307");  // marks sorted by combining class
  CHECK(mha::nfc("\u1100\u1161\u11A8") == "\uAC01");    // Hangul L V T
  CHECK(mha::nfc("\u0958") == "\u0915\u093C");          // a composition exclusion
  CHECK(mha::nfc("\u0301e") == "\u0301e");              // a mark with nothing before it
  CHECK(mha::nfc("e\u0301\u0301") == "\u00E9\u0301");
  CHECK(mha::nfc("plain ASCII") == "plain ASCII");
}

TEST_CASE("tokenizer: byte-level steps of Llama 3, Qwen and SmolLM2 as data", "[tokenizer]") {
  // GPT-2's tiny byte-level vocab: bytes 0..255, then "Ġt", "he", "Ġthe".
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[mha::byte_level_char(static_cast<unsigned char>(b))] = b;
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  vocab["12"] = 259;
  json doc = {
      {"added_tokens", {{{"id", 260}, {"content", "<|begin_of_text|>"}, {"special", true}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "Sequence"},
        {"processors",
         {{{"type", "ByteLevel"}},
          {{"type", "TemplateProcessing"},
           {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
           {"special_tokens", {{"<|begin_of_text|>", {{"ids", {260}}}}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"Ġ t", "h e", "Ġt he", "1 2"}}}}};
  CHECK(from(doc).encode(" the 123") == Ids{260, 258, 32, 259, 51});
  CHECK(from(doc).bos_id() == 260);
  // NFC first: "e" + U+0301 is the byte pair of "é".
  CHECK(from(doc).encode("e\u0301", false) == Ids{0xC3, 0xA9});
  // ignore_merges (Llama 3): a word that is a piece is that piece, though no merge makes it.
  doc["model"]["merges"] = {"Ġ t", "h e", "1 2"};
  CHECK(from(doc).encode(" the", false) == Ids{256, 257});
  doc["model"]["ignore_merges"] = true;
  CHECK(from(doc).encode(" the", false) == Ids{258});
}

TEST_CASE("tokenizer: Digits splits digits before the byte-level step (SmolLM2)", "[tokenizer]") {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[mha::byte_level_char(static_cast<unsigned char>(b))] = b;
  vocab["12"] = 256;
  json doc = {{"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Digits"}, {"individual_digits", true}},
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"1 2"}}}}};
  CHECK(from(doc).encode("x12") == Ids{'x', '1', '2'});
  CHECK(from(doc).lossless());
  doc["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
  CHECK(from(doc).encode("x12") == Ids{'x', 256});
}

TEST_CASE("tokenizer: tokenizer types and steps it does not implement are refused naming the field",
          "[tokenizer]") {
  using Refusal = std::pair<std::string, std::string>;
  CHECK(config_error([] { mha::read_tokenizer_json(kData + "unigram.json"); }) ==
        Refusal{"model.type", kData +
                                  "unigram.json: model.type is \"Unigram\": only \"BPE\" is supported (not "
                                  "Unigram, WordPiece or WordLevel)"});
  CHECK(
      config_error([] { mha::read_tokenizer_json(kData + "wordpiece.json"); }).second ==
      kData +
          "wordpiece.json: model.type is \"WordPiece\": only \"BPE\" is supported (not Unigram, WordPiece or "
          "WordLevel)");
  CHECK(config_error([] { mha::read_tokenizer_json(kData + "wordlevel.json"); }).first == "model.type");

  const json ok = read_json(kData + "sentencepiece_byte_fallback.json");
  const auto refused = [](const json& doc) { return config_error([&] { from(doc); }); };
  json d = ok;
  d["normalizer"]["normalizers"][1] = {{"type", "Lowercase"}};
  CHECK(refused(d) ==
        Refusal{"normalizer.normalizers[1].type",
                "tokenizer.json: normalizer.normalizers[1].type is \"Lowercase\": supported normalizers "
                "are NFC, Prepend, Replace and a Sequence of them"});
  d = ok;
  d["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
  CHECK(refused(d).first == "normalizer.normalizers[1].pattern");
  d = ok;
  d["pre_tokenizer"] = {{"type", "Whitespace"}};
  CHECK(refused(d) ==
        Refusal{"pre_tokenizer.type",
                "tokenizer.json: pre_tokenizer.type is \"Whitespace\": supported pre-tokenizers are "
                "Split (a Regex, Isolated), Digits, Metaspace, ByteLevel and a Sequence of them"});
  d["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}}}}};
  CHECK(
      refused(d) ==
      Refusal{
          "pre_tokenizer.pretokenizers[0].pattern.Regex",
          "tokenizer.json: pre_tokenizer.pretokenizers[0].pattern.Regex is not supported: the split pattern "
          "'\\w+' has the escape '\\w' at byte 0, which is not supported"});
  d["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "a+"}};
  d["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
  CHECK(refused(d).first == "pre_tokenizer.pretokenizers[0].behavior");
  d = ok;
  d["post_processor"] = {{"type", "BertProcessing"}};
  CHECK(refused(d).first == "post_processor.type");
  d = ok;
  d["decoder"] = {{"type", "WordPiece"}};
  CHECK(refused(d).first == "decoder.type");
  d["decoder"] = {{"type", "ByteLevel"}};
  CHECK(refused(d).first == "decoder.type");  // character pieces are not byte-level
  d = ok;
  d["model"]["byte_fallback"] = false;
  CHECK(refused(d).first == "pre_tokenizer");
  d = ok;
  d["added_tokens"][1]["lstrip"] = true;
  CHECK(refused(d).first == "added_tokens[1].lstrip");
  d = ok;
  d["model"]["dropout"] = 0.1;
  CHECK(refused(d).first == "model.dropout");
  d = ok;
  d["model"]["continuing_subword_prefix"] = "##";
  CHECK(refused(d).first == "model.continuing_subword_prefix");
}
