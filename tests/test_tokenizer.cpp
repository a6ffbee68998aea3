// Tests of the GPT-2 byte-level BPE tokenizer: every case of tests/data/bpe_cases.json (the
// reference encoder's ids and pre-tokenizer matches) id for id, decode round trips, special tokens,
// display pieces, tokenizer.json against vocab.json + merges.txt, and every refusal with its message.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "errors.hpp"
#include "io/tokenizer_files.hpp"
#include "temp_dir.hpp"
#include "tokenizer/bpe.hpp"

using mha::BpeTokenizer;
using mha::BpeVocab;
using mha::ConfigError;
using mha::FileError;
using mha::test::TempDir;
using nlohmann::json;
using Ids = std::vector<std::int32_t>;

namespace {

const std::string kData = MHA_TEST_DATA_DIR;
const std::string kVocab = kData + "/gpt2_tokenizer/vocab.json";
const std::string kMerges = kData + "/gpt2_tokenizer/merges.txt";
constexpr const char* kEot = "<|endoftext|>";

const BpeTokenizer& gpt2() {
  static const BpeTokenizer tok = mha::read_tokenizer_files(kVocab, kMerges);
  return tok;
}

struct Case {
  std::string text;
  std::vector<std::string> words;
  Ids ids;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::ifstream in(kData + "/bpe_cases.json", std::ios::binary);
    const json doc = json::parse(in);
    std::vector<Case> out;
    for (const json& c : doc) out.push_back({c["text"], c["words"], c["ids"]});
    return out;
  }();
  return all;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The message of the E that f throws (fails the test if it throws nothing or something else).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return {};
}

std::int32_t id_of(const std::string& piece) {
  const auto id = gpt2().token_id(piece);
  REQUIRE(id);
  return *id;
}

// The reference's special-token rule: the text between occurrences encoded as ordinary text.
Ids split_on_eot(const std::string& text) {
  Ids out;
  std::size_t pos = 0;
  for (std::size_t at; (at = text.find(kEot, pos)) != std::string::npos; pos = at + std::strlen(kEot)) {
    const Ids part = gpt2().encode_ordinary(text.substr(pos, at - pos));
    out.insert(out.end(), part.begin(), part.end());
    out.push_back(50256);
  }
  const Ids rest = gpt2().encode_ordinary(text.substr(pos));
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// GPT-2's vocab and merges as a Hugging Face tokenizer.json (merges as strings or as pairs).
json gpt2_tokenizer_json(bool pair_merges) {
  json merges = json::array();
  const std::string text = read_text(kMerges);
  std::size_t pos = text.find('\n') + 1;  // past "#version: 0.2"
  for (std::size_t end; (end = text.find('\n', pos)) != std::string::npos; pos = end + 1) {
    const std::string line = text.substr(pos, end - pos);
    const std::size_t space = line.find(' ');
    if (pair_merges)
      merges.push_back({line.substr(0, space), line.substr(space + 1)});
    else
      merges.push_back(line);
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {{{"id", 50256},
             {"content", kEot},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", true},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", json::parse(read_text(kVocab))},
            {"merges", merges}}}};
}

// A small byte-level vocab: the 256 byte pieces (ids 0..255 in byte order), then "Ġt", "he", "Ġthe".
json tiny_vocab() {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[mha::byte_level_char(static_cast<unsigned char>(b))] = b;
  v["Ġt"] = 256;
  v["he"] = 257;
  v["Ġthe"] = 258;
  return v;
}
const std::string kTinyMerges = "#version: 0.2\nĠ t\nh e\nĠt he\n";

BpeTokenizer tiny(const std::string& vocab_json, const std::string& merges_txt) {
  return mha::parse_tokenizer_files(vocab_json, merges_txt, "vocab.json", "merges.txt");
}

std::string file_error(const std::string& vocab_json, const std::string& merges_txt) {
  return message_of<FileError>([&] { tiny(vocab_json, merges_txt); });
}

json tiny_tokenizer_json() {
  return {{"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"added_tokens", json::array()},
          {"model", {{"type", "BPE"}, {"vocab", tiny_vocab()}, {"merges", {"Ġ t", "h e", "Ġt he"}}}}};
}

std::string json_error(const json& doc) {
  return message_of<FileError>([&] { mha::parse_tokenizer_json(doc.dump(), "tokenizer.json"); });
}

std::string config_error(const json& doc) {
  return message_of<ConfigError>([&] { mha::parse_tokenizer_json(doc.dump(), "tokenizer.json"); });
}

}  // namespace

TEST_CASE("tokenizer: every reference case, id for id", "[tokenizer]") {
  const BpeTokenizer& tok = gpt2();
  REQUIRE(tok.vocab_size() == 50257);
  REQUIRE(cases().size() >= 700);
  std::size_t with_special = 0;
  for (const Case& c : cases()) {
    INFO("text: " << json(c.text).dump());
    const auto words = mha::pretokenize(c.text);
    CHECK(std::vector<std::string>(words.begin(), words.end()) == c.words);
    CHECK(tok.encode_ordinary(c.text) == c.ids);
    if (c.text.find(kEot) == std::string::npos) {
      CHECK(tok.encode(c.text) == c.ids);
    } else {
      ++with_special;
      CHECK(tok.encode(c.text) == split_on_eot(c.text));
      CHECK(tok.decode(tok.encode(c.text)) == c.text);
    }
    CHECK(tok.decode(c.ids) == c.text);
  }
  CHECK(with_special >= 10);
}

TEST_CASE("tokenizer: known ids, and the cache gives what a first encode gives", "[tokenizer]") {
  const BpeTokenizer& tok = gpt2();
  CHECK(tok.encode("Hello world") == Ids{15496, 995});
  CHECK(tok.encode("") == Ids{});
  CHECK(tok.encode(kEot) == Ids{50256});
  CHECK(tok.encode_ordinary(kEot) == Ids{27, 91, 437, 1659, 5239, 91, 29});
  CHECK(tok.encode("Hello<|endoftext|>World") == Ids{15496, 50256, 10603});
  // A copy shares the cache; a fresh tokenizer has none. Same ids either way, long words included.
  const BpeTokenizer fresh = mha::read_tokenizer_files(kVocab, kMerges);
  const BpeTokenizer copy = tok;
  for (const Case& c : cases()) {
    INFO("text: " << json(c.text).dump());
    CHECK(copy.encode_ordinary(c.text) == c.ids);
    CHECK(fresh.encode_ordinary(c.text + c.text) == tok.encode_ordinary(c.text + c.text));
  }
}

TEST_CASE("tokenizer: special tokens", "[tokenizer]") {
  const BpeTokenizer& tok = gpt2();
  REQUIRE(tok.token_id(kEot) == 50256);
  CHECK(tok.is_special(50256));
  CHECK_FALSE(tok.is_special(262));
  CHECK(tok.piece(50256) == kEot);
  CHECK(tok.decode({50256}) == kEot);
  CHECK(tok.encode("<|endoftext|><|endoftext|>") == Ids{50256, 50256});
  // The space before a special token ends its segment, so it is a word of its own.
  CHECK(tok.encode(" <|endoftext|>") == Ids{220, 50256});
  CHECK(tok.encode("<|endoftext") == tok.encode_ordinary("<|endoftext"));
  CHECK(tok.encode("a <|endoftext|> b") == split_on_eot("a <|endoftext|> b"));
}

TEST_CASE("tokenizer: decode", "[tokenizer]") {
  const BpeTokenizer& tok = gpt2();
  const Ids smile = tok.encode("😀");
  REQUIRE(smile.size() > 1);
  CHECK(tok.decode(smile) == "😀");
  CHECK_THROWS_AS(mha::check_utf8(tok.decode({smile[0]})), mha::Utf8Error);  // part of a character
  CHECK(tok.decode({id_of(mha::byte_level_char(0xF0))}) == "\xF0");
  CHECK(tok.decode({id_of("Ġthe"), id_of("Ċ")}) == " the\n");
  CHECK(message_of<ConfigError>([&] {
          tok.decode({262, 50257});
        }) == "token id 50257 is out of range 0..50256");
  CHECK(message_of<ConfigError>([&] { tok.decode({-1}); }) == "token id -1 is out of range 0..50256");
  CHECK(message_of<ConfigError>([&] { tok.piece(99999); }) == "token id 99999 is out of range 0..50256");

  // Round trips on random valid UTF-8: code points from every plane, no surrogates.
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> len(0, 40), plane(0, 5);
  for (int n = 0; n < 300; ++n) {
    std::u32string cps;
    for (int i = len(rng); i > 0; --i) {
      const int p = plane(rng);
      char32_t cp = p == 0   ? rng() % 0x80
                    : p == 1 ? rng() % 0x800
                    : p < 4  ? rng() % 0x10000
                             : rng() % 0x110000;
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = U' ';
      cps += cp;
    }
    std::string text;
    for (const char32_t cp : cps) {  // encode as UTF-8
      if (cp < 0x80) {
        text += char(cp);
      } else if (cp < 0x800) {
        text += {char(0xC0 | cp >> 6), char(0x80 | (cp & 0x3F))};
      } else if (cp < 0x10000) {
        text += {char(0xE0 | cp >> 12), char(0x80 | (cp >> 6 & 0x3F)), char(0x80 | (cp & 0x3F))};
      } else {
        text += {char(0xF0 | cp >> 18), char(0x80 | (cp >> 12 & 0x3F)), char(0x80 | (cp >> 6 & 0x3F)),
                 char(0x80 | (cp & 0x3F))};
      }
    }
    INFO("text: " << json(text).dump());
    CHECK(tok.decode(tok.encode(text)) == text);
    const auto words = mha::pretokenize(text);
    std::string joined;
    for (const auto w : words) joined += w;
    CHECK(joined == text);
  }
}

TEST_CASE("tokenizer: display pieces", "[tokenizer]") {
  const BpeTokenizer& tok = gpt2();
  CHECK(tok.piece(id_of("Ġthe")) == "Ġthe");
  CHECK(tok.display_piece(id_of("Ġthe")) == "␣the");
  CHECK(tok.display_piece(id_of("Ġ")) == "␣");
  CHECK(tok.display_piece(id_of("Ċ")) == "↵");
  CHECK(tok.display_piece(id_of("ĊĊ")) == "↵↵");
  CHECK(tok.display_piece(id_of("ĉ")) == "⇥");
  CHECK(tok.display_piece(id_of("č")) == "␍");
  CHECK(tok.display_piece(id_of("hello")) == "hello");
  CHECK(tok.display_piece(id_of("Ã©")) == "é");
  CHECK(tok.display_piece(id_of("âĢĶ")) == "—");
  CHECK(tok.display_piece(id_of("â")) == "\\xE2");
  CHECK(tok.display_piece(id_of("âĢ")) == "\\xE2\\x80");
  CHECK(tok.display_piece(id_of("Ā")) == "\\x00");  // byte 0x00
  CHECK(tok.display_piece(id_of("ġ")) == "\\x7F");  // DEL
  CHECK(tok.display_piece(50256) == kEot);
  CHECK(message_of<ConfigError>([&] { tok.display_piece(50257); }) ==
        "token id 50257 is out of range 0..50256");
  // Every id has a label that is valid UTF-8.
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string label = tok.display_piece(id);
    REQUIRE_FALSE(label.empty());
    REQUIRE_NOTHROW(mha::check_utf8(label));
  }
}

TEST_CASE("tokenizer: invalid UTF-8 is refused with its byte offset", "[tokenizer]") {
  const BpeTokenizer& tok = gpt2();
  const struct {
    std::string text;
    std::size_t offset;
    std::string shown;
  } bad[] = {
      {"\xFF", 0, "\\xFF"},
      {"ab\x80", 2, "\\x80"},                              // stray continuation byte
      {"abc\xC3", 3, "\\xC3"},                             // truncated at the end
      {"ok \xE2\x82 more", 3, "\\xE2\\x82\\x20\\x6D..."},  // truncated inside
      {"\xC0\xAF", 0, "\\xC0\\xAF"},                       // overlong '/'
      {"\xE0\x80\xAF", 0, "\\xE0\\x80\\xAF"},              // overlong
      {"x\xED\xA0\x80", 1, "\\xED\\xA0\\x80"},             // surrogate U+D800
      {"\xF4\x90\x80\x80", 0, "\\xF4\\x90\\x80\\x80"},     // past U+10FFFF
      {"\xF5\x80\x80\x80", 0, "\\xF5\\x80\\x80\\x80"},
      {"é\xA9", 2, "\\xA9"},
  };
  for (const auto& b : bad) {
    INFO("text: " << json(b.text).dump(-1, ' ', false, json::error_handler_t::replace));
    try {
      tok.encode(b.text);
      FAIL("accepted");
    } catch (const mha::Utf8Error& e) {
      CHECK(e.byte_offset == b.offset);
      CHECK(e.argument == "text");
      CHECK(std::string(e.what()) ==
            "text: invalid UTF-8 at byte offset " + std::to_string(b.offset) + " (" + b.shown + ")");
    }
    CHECK_THROWS_AS(tok.encode_ordinary(b.text), mha::Utf8Error);
    CHECK_THROWS_AS(mha::pretokenize(b.text), mha::Utf8Error);
  }
  // NUL and the largest code point are valid.
  CHECK(tok.decode(tok.encode(std::string("a\0b", 3))) == std::string("a\0b", 3));
  CHECK(tok.decode(tok.encode("\xF4\x8F\xBF\xBF")) == "\xF4\x8F\xBF\xBF");
}

TEST_CASE("tokenizer: the lowest-ranked pair merges first, as Hugging Face's tokenizers do", "[tokenizer]") {
  // With "ab a" ranked before "a b" (no trained vocabulary has that order), merging one "a b" forms an
  // "ab a" of a lower rank, which merges next. (encoder.py would merge every "a b" of the word first:
  // the two agree whenever a merge's pieces are older than the merge, as in every trained BPE.)
  BpeVocab v;
  for (int b = 0; b < 256; ++b) v.pieces.push_back(mha::byte_level_char(static_cast<unsigned char>(b)));
  v.pieces.insert(v.pieces.end(), {"ab", "aba", "aa"});
  v.merges = {{"ab", "a"}, {"a", "b"}, {"a", "a"}};
  const BpeTokenizer tok(v);
  CHECK(tok.encode("abab") == Ids{257, 'b'});
  CHECK(tok.encode("aba") == Ids{257});
  CHECK(tok.encode("aaa") == Ids{258, 'a'});  // left to right, not overlapping
  CHECK(tok.encode("aaaa") == Ids{258, 258});
  const std::string long_word(100000, 'a');  // one word: a merge loop of n log n
  const Ids ids = tok.encode(long_word);
  CHECK(ids == Ids(50000, 258));
}

TEST_CASE("tokenizer: tokenizer.json gives the same ids as vocab.json + merges.txt", "[tokenizer]") {
  TempDir dir("mha_tokenizer_");
  for (const bool pairs : {false, true}) {
    INFO("merges as " << (pairs ? "pairs" : "strings"));
    json doc = gpt2_tokenizer_json(pairs);
    write_text(dir.file("tokenizer.json"), doc.dump());
    const BpeTokenizer tok = mha::read_tokenizer_json(dir.file("tokenizer.json"));
    REQUIRE(tok.vocab_size() == 50257);
    CHECK(tok.is_special(50256));
    for (const Case& c : cases()) {
      INFO("text: " << json(c.text).dump());
      REQUIRE(tok.encode(c.text) == gpt2().encode(c.text));
    }
    // A folder with tokenizer.json uses it (here with one more added token than GPT-2 has).
    doc["added_tokens"].push_back({{"id", 50257}, {"content", "<|pad|>"}, {"special", true}});
    write_text(dir.file("tokenizer.json"), doc.dump());
    const BpeTokenizer padded = mha::load_tokenizer(dir.path.string());
    CHECK(padded.vocab_size() == 50258);
    CHECK(padded.encode("a<|pad|> b<|endoftext|>") == Ids{64, 50257, 275, 50256});
    CHECK(padded.decode({64, 50257, 275}) == "a<|pad|> b");
    CHECK(padded.display_piece(50257) == "<|pad|>");
  }
}

TEST_CASE("tokenizer: load_tokenizer finds the files of a model folder", "[tokenizer]") {
  TempDir dir("mha_tokenizer_");
  const std::string folder = dir.path.string();
  CHECK(message_of<FileError>([&] { mha::load_tokenizer(folder); }) ==
        folder + ": no tokenizer: looked for tokenizer.json, or vocab.json with merges.txt");
  write_text(dir.file("vocab.json"), read_text(kVocab));
  CHECK(
      message_of<FileError>([&] { mha::load_tokenizer(folder); }) ==
      folder +
          ": no tokenizer: looked for tokenizer.json, or vocab.json with merges.txt; vocab.json is there but "
          "merges.txt is not");
  write_text(dir.file("merges.txt"), read_text(kMerges));
  CHECK(mha::load_tokenizer(folder).encode("Hello world") == Ids{15496, 995});
  CHECK(message_of<FileError>([&] { mha::load_tokenizer(dir.file("vocab.json")); }) ==
        dir.file("vocab.json") + ": not a folder");
}

TEST_CASE("tokenizer: vocab.json + merges.txt refusals name the file and the entry", "[tokenizer]") {
  const std::string vocab = tiny_vocab().dump();
  const BpeTokenizer ok = tiny(vocab, kTinyMerges);
  CHECK(ok.encode(" the") == Ids{258});
  CHECK(ok.encode("the") == Ids{'t', 257});
  // No "#version" line, CRLF line ends, no final newline: the same tokenizer.
  CHECK(tiny(vocab, "Ġ t\r\nh e\r\nĠt he").encode(" the them") == ok.encode(" the them"));
  CHECK(tiny(vocab, "").encode(" the") == Ids{' ', 't', 'h', 'e'});

  CHECK_THAT(file_error("{\"a\": 1", kTinyMerges), Catch::StartsWith("vocab.json: malformed JSON: "));
  CHECK(file_error("[1, 2]", kTinyMerges) ==
        "vocab.json: the vocab must be a JSON object {\"piece\": id}, got a array");
  CHECK(file_error("{\"a\": 0, \"a\": 1}", kTinyMerges) ==
        "vocab.json: the key 'a' appears twice in one object");
  CHECK(file_error(std::string(100, '[') + std::string(100, ']'), kTinyMerges) ==
        "vocab.json: JSON nested deeper than 64 levels");
  json v = tiny_vocab();
  v["x y"] = 5;
  CHECK(file_error(v.dump(), kTinyMerges) ==
        "vocab.json: the vocab entry 'ą' and entry 'x y' both have id 5");
  v = tiny_vocab();
  v["extra"] = 300;
  CHECK(file_error(v.dump(), kTinyMerges) ==
        "vocab.json: the vocab entry 'extra': id 300 is out of range: with 260 entries the ids run 0..259");
  for (const json& bad_id : {json(-1), json(1.5), json("7"), json(nullptr)}) {
    v = tiny_vocab();
    v["extra"] = bad_id;
    CHECK(file_error(v.dump(), kTinyMerges) ==
          "vocab.json: the vocab entry 'extra': the id must be a non-negative integer, got " + bad_id.dump());
  }
  v = tiny_vocab();
  v[""] = 259;
  CHECK(file_error(v.dump(), kTinyMerges) == "vocab.json: the vocab has an empty piece (id 259)");
  v = tiny_vocab();
  v["▁the"] = 259;
  CHECK(file_error(v.dump(), kTinyMerges) ==
        "vocab.json: vocab piece '▁the' (id 259) has U+2581, which stands for no byte (not a byte-level BPE "
        "vocab?)");
  v = tiny_vocab();
  v.erase("Ā");
  v["Ā2"] = 0;
  CHECK(file_error(v.dump(), kTinyMerges) ==
        "vocab.json: the vocab has no piece for byte 0x00 ('Ā'); a byte-level vocab has one for each of the "
        "256 bytes");

  CHECK(file_error(vocab, "#version: 0.2\nĠ t\nĠ zz\n") == "merges.txt: line 3: 'zz' is not in vocab.json");
  CHECK(file_error(vocab, "#version: 0.2\nĠ h\n") ==
        "merges.txt: line 2: its result 'Ġh' is not in vocab.json");
  CHECK(file_error(vocab, "#version: 0.2\nĠ t\nĠ t\n") == "merges.txt: line 3 repeats line 2");
  CHECK(file_error(vocab, "Ġ t\n\nh e\n") ==
        "merges.txt: line 2: expected two pieces separated by one space, got ''");
  for (const std::string line : {"a b c", "a  b", "ab", " a", "a ", "a\tb"})
    CHECK(file_error(vocab, "Ġ t\n" + line + "\n") ==
          "merges.txt: line 2: expected two pieces separated by one space, got '" + line + "'");
  CHECK(file_error(vocab, "#version: 0.2\n" + std::string(100, 'x') + "\n") ==
        "merges.txt: line 2: expected two pieces separated by one space, got '" + std::string(80, 'x') +
            "...' (100 bytes)");
}

TEST_CASE("tokenizer: tokenizer.json refusals name the field or entry", "[tokenizer]") {
  const json ok = tiny_tokenizer_json();
  CHECK(mha::parse_tokenizer_json(ok.dump(), "tokenizer.json").encode(" the") == Ids{258});

  CHECK(json_error(json::array()) == "tokenizer.json: expected a JSON object, got a array");
  json d = ok;
  d.erase("model");
  CHECK(json_error(d) == "tokenizer.json: no \"model\" object");
  // Types and options this reader does not implement: ConfigErrors naming the field.
  d = ok;
  d["model"]["type"] = "WordPiece";
  CHECK(config_error(d) ==
        "tokenizer.json: model.type is \"WordPiece\": only \"BPE\" is supported (not Unigram, "
        "WordPiece or WordLevel)");
  d = ok;
  d["model"]["dropout"] = 0.1;
  CHECK(config_error(d) ==
        "tokenizer.json: model.dropout is 0.1: BPE dropout is not supported (it makes encoding random)");
  d["model"]["dropout"] = 0.0;
  CHECK_NOTHROW(mha::parse_tokenizer_json(d.dump(), "tokenizer.json"));
  d = ok;
  d["model"]["continuing_subword_prefix"] = "##";
  CHECK(config_error(d) ==
        "tokenizer.json: model.continuing_subword_prefix is \"##\": subword prefixes are not supported");
  d = ok;
  d["model"]["byte_fallback"] = true;
  CHECK(config_error(d) ==
        "tokenizer.json: model.byte_fallback is true with a ByteLevel pre-tokenizer: byte-level "
        "pieces need no fallback");
  d = ok;
  d["normalizer"] = {{"type", "Lowercase"}};
  CHECK(config_error(d) ==
        "tokenizer.json: normalizer.type is \"Lowercase\": supported normalizers are NFC, "
        "Prepend, Replace and a Sequence of them");
  d = ok;
  d["pre_tokenizer"] = {{"type", "Whitespace"}};
  CHECK(config_error(d) ==
        "tokenizer.json: pre_tokenizer.type is \"Whitespace\": supported pre-tokenizers are Split (a Regex, "
        "Isolated), Digits, Metaspace, ByteLevel and a Sequence of them");
  d = ok;
  d["pre_tokenizer"]["add_prefix_space"] = true;  // supported: "the" is encoded as " the"
  CHECK(mha::parse_tokenizer_json(d.dump(), "tokenizer.json").encode("the") == Ids{258});
  d = ok;
  d.erase("pre_tokenizer");
  CHECK_THAT(config_error(d), Catch::StartsWith("tokenizer.json: pre_tokenizer has no ByteLevel step"));
  d = ok;
  d["model"]["merges"] = {"Ġ t", 5};
  CHECK(json_error(d) ==
        "tokenizer.json: model.merges[1]: expected \"left right\" or [\"left\", \"right\"], got 5");
  d["model"]["merges"] = {"Ġ t", "he"};
  CHECK(json_error(d) == "tokenizer.json: model.merges[1]: expected \"left right\" (one space), got \"he\"");
  d["model"]["merges"] = {"Ġ t", {"Ġ", "zz"}};
  CHECK(json_error(d) == "tokenizer.json: model.merges[1]: 'zz' is not in model.vocab");
  d["model"]["merges"] = {"Ġ t", {"Ġ", "t"}};
  CHECK(json_error(d) == "tokenizer.json: model.merges[1] repeats model.merges[0]");
  d = ok;
  d["model"]["vocab"]["Ġt"] = 7;
  CHECK(json_error(d) == "tokenizer.json: model.vocab entry 'Ġt' and entry 'ć' both have id 7");
  d = ok;
  d["added_tokens"] = {{{"id", 12}, {"content", "<|x|>"}}};
  CHECK(json_error(d) == "tokenizer.json: added_tokens[0] '<|x|>' and model.vocab entry 'Č' both have id 12");
  d["added_tokens"] = {{{"id", 900}, {"content", "<|x|>"}}};
  CHECK(
      json_error(d) ==
      "tokenizer.json: added_tokens[0] '<|x|>': id 900 is out of range: with 260 tokens the ids run 0..259");
  d["added_tokens"] = {{{"id", 5}, {"content", "he"}}};
  CHECK(json_error(d) == "tokenizer.json: added_tokens[0] 'he' has id 5 but model.vocab gives it 257");
  d["added_tokens"] = {{{"content", "<|x|>"}}};
  CHECK(json_error(d) ==
        "tokenizer.json: added_tokens[0]: expected {\"id\": non-negative integer, \"content\": "
        "non-empty string}, got {\"content\":\"<|x|>\"}");
  d["added_tokens"] = {{{"id", 259}, {"content", "<|x|>"}}};
  const BpeTokenizer with_added = mha::parse_tokenizer_json(d.dump(), "tokenizer.json");
  CHECK(with_added.encode("<|x|> the") == Ids{259, 258});
  d["added_tokens"] = {{{"id", 260}, {"content", "<|x|>"}}};
  CHECK(
      json_error(d) ==
      "tokenizer.json: added_tokens[0] '<|x|>': id 260 is out of range: with 260 tokens the ids run 0..259");
}

TEST_CASE("tokenizer: files that cannot be read are refused before parsing", "[tokenizer]") {
  TempDir dir("mha_tokenizer_");
  CHECK(message_of<FileError>([&] { mha::read_tokenizer_files(dir.path.string(), kMerges); }) ==
        dir.path.string() + ": cannot read: Is a directory");
  CHECK(message_of<FileError>([&] { mha::read_tokenizer_files(kVocab, dir.file("none.txt")); }) ==
        dir.file("none.txt") + ": cannot open: No such file or directory");
  CHECK(message_of<FileError>([&] { mha::read_tokenizer_json("/dev/null"); }) ==
        "/dev/null: cannot read: not a regular file");
  {
    std::ofstream(dir.file("big.json")).put('{');
    std::filesystem::resize_file(dir.file("big.json"), mha::kMaxTokenizerFileBytes + 1);  // sparse
  }
  CHECK(message_of<FileError>([&] { mha::read_tokenizer_json(dir.file("big.json")); }) ==
        dir.file("big.json") + ": 67108865 bytes is more than a tokenizer file may have (64 MiB)");
  CHECK_THAT(message_of<FileError>([&] { mha::read_tokenizer_files(kMerges, kMerges); }),
             Catch::StartsWith(kMerges + ": malformed JSON: "));
}

TEST_CASE("tokenizer: BpeTokenizer checks a vocab given in memory", "[tokenizer]") {
  BpeVocab v;
  for (int b = 0; b < 256; ++b) v.pieces.push_back(mha::byte_level_char(static_cast<unsigned char>(b)));
  v.pieces.push_back("ab");
  v.merges = {{"a", "b"}, {"a", "b"}};
  CHECK(message_of<ConfigError>([&] { BpeTokenizer{v}; }) == "merge 1 ('a' 'b') repeats merge 0");
  v.merges = {{"a", "c"}};
  CHECK(message_of<ConfigError>([&] { BpeTokenizer{v}; }) ==
        "merge 0 ('a' 'c'): its result 'ac' is not in the vocab");
  v.merges = {{"a", "b"}};
  v.special_ids = {256};
  CHECK(message_of<ConfigError>([&] { BpeTokenizer{v}; }) ==
        "merge 0 ('a' 'b'): its result is the special token id 256");
  v.special_ids = {'a'};
  CHECK(message_of<ConfigError>([&] { BpeTokenizer{v}; }) ==
        "the piece for byte 0x61 ('a', id 97) is a special token");
  v.merges = {};
  v.special_ids = {300};
  CHECK(message_of<ConfigError>([&] { BpeTokenizer{v}; }) == "special token id 300 is out of range 0..256");
  v.special_ids = {};
  v.pieces.push_back("ab");
  CHECK(message_of<ConfigError>([&] { BpeTokenizer{v}; }) ==
        "vocab piece 'ab' (id 257) repeats id 256's piece");
  CHECK(message_of<ConfigError>([&] { BpeTokenizer{BpeVocab{}}; }) == "the vocab is empty");
}
