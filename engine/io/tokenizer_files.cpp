// Readers for vocab.json + merges.txt and tokenizer.json. JSON is parsed with nlohmann::json and a
// callback that refuses repeated keys (a DOM would keep one silently) and deep nesting; every piece,
// id and merge is checked here, with the file and line or entry, before BpeTokenizer sees it.
#include "io/tokenizer_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "errors.hpp"
#include "tokenizer/split_pattern.hpp"

namespace mha {

namespace {

using nlohmann::json;

constexpr int kMaxJsonDepth = 64;
constexpr const char* kEndOfText = "<|endoftext|>";

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw FileError(name, name + ": " + what);
}

// At most about 80 bytes of a piece, line or JSON value for a message (cut at a character).
std::string clipped(std::string_view s) {
  if (s.size() <= 80) return std::string(s);
  std::size_t cut = 80;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...";
}

std::string shown(std::string_view s) {
  return "'" + clipped(s) + "'" + (s.size() > 80 ? " (" + std::to_string(s.size()) + " bytes)" : "");
}

std::string shown_json(const json& v) {
  return clipped(v.dump(-1, ' ', false, json::error_handler_t::replace));
}

// The whole file, refusing a folder, device or FIFO (which could block or never end) and anything
// over kMaxTokenizerFileBytes, before and while reading.
std::string read_bounded(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) fail(path, std::string("cannot read: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail(path,
         std::string("cannot read: ") + (S_ISDIR(st.st_mode) ? std::strerror(EISDIR) : "not a regular file"));
  const auto too_large = [&](std::uint64_t bytes) {
    fail(path, std::to_string(bytes) + " bytes is more than a tokenizer file may have (" +
                   std::to_string(kMaxTokenizerFileBytes >> 20) + " MiB)");
  };
  if (std::uint64_t(st.st_size) > kMaxTokenizerFileBytes) too_large(std::uint64_t(st.st_size));
  std::string out;
  out.reserve(std::size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;
    out.append(buf, std::size_t(n));
    if (out.size() > kMaxTokenizerFileBytes) too_large(out.size());  // grew while being read
  }
  return out;
}

json parse_json(std::string_view text, const std::string& name) {
  std::vector<std::unordered_set<std::string>> keys;  // of each object being parsed
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: keys.emplace_back(); [[fallthrough]];
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          fail(name, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          fail(name, "the key " + shown(parsed.get<std::string>()) + " appears twice in one object");
        break;
      case json::parse_event_t::object_end: keys.pop_back(); break;
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    fail(name, std::string("malformed JSON: ") + e.what());
  }
}

// A {"piece": id} object (vocab.json, tokenizer.json's model.vocab) as pieces by id. `extra` more
// ids may follow (added tokens): ids must lie in 0..size + extra - 1, each used once.
struct Vocab {
  std::vector<std::string> pieces;  // by id; empty where not (yet) filled
  std::unordered_map<std::string, std::int32_t> ids;
};

Vocab read_vocab(const json& object, std::size_t extra, const std::string& name, const std::string& what) {
  if (!object.is_object())
    fail(name, what + " must be a JSON object {\"piece\": id}, got a " + object.type_name());
  Vocab v;
  const std::size_t n = object.size() + extra;
  if (n > std::size_t(INT32_MAX)) fail(name, what + " has more than 2^31 - 1 entries");
  v.pieces.resize(n);
  std::vector<bool> used(n, false);
  v.ids.reserve(n);
  for (const auto& [piece, value] : object.items()) {
    const std::string where = what + " entry " + shown(piece);
    if (piece.empty()) fail(name, what + " has an empty piece (id " + shown_json(value) + ")");
    if (!value.is_number_unsigned())
      fail(name, where + ": the id must be a non-negative integer, got " + shown_json(value));
    const std::uint64_t id = value.get<std::uint64_t>();
    if (id >= n)
      fail(name, where + ": id " + std::to_string(id) + " is out of range: with " + std::to_string(n) +
                     " entries the ids run 0.." + std::to_string(n - 1));
    if (used[id])
      fail(name, where + " and entry " + shown(v.pieces[id]) + " both have id " + std::to_string(id));
    used[id] = true;
    v.pieces[id] = piece;
    v.ids.emplace(piece, std::int32_t(id));
  }
  return v;
}

std::int32_t merge_part(const Vocab& v, const std::string& piece, const std::string& name,
                        const std::string& where, const std::string& vocab_name, bool result) {
  const auto it = v.ids.find(piece);
  if (it == v.ids.end())
    fail(name, where + ": " + (result ? "its result " : "") + shown(piece) + " is not in " + vocab_name);
  return it->second;
}

// Checks one merge's pieces and result against the vocab and against the merges before it.
void add_merge(const Vocab& v, std::string left, std::string right, const std::string& name,
               const std::string& where, const std::string& vocab_name,
               std::unordered_map<std::uint64_t, std::string>& seen, BpeVocab& out) {
  const std::int32_t l = merge_part(v, left, name, where, vocab_name, false);
  const std::int32_t r = merge_part(v, right, name, where, vocab_name, false);
  merge_part(v, left + right, name, where, vocab_name, true);
  const auto [it, inserted] = seen.emplace(std::uint64_t(std::uint32_t(l)) << 32 | std::uint32_t(r), where);
  if (!inserted) fail(name, where + " repeats " + it->second);
  out.merges.emplace_back(std::move(left), std::move(right));
}

// BpeTokenizer's own checks (byte-level pieces, the 256 byte pieces) as FileErrors.
BpeTokenizer build(BpeVocab vocab, const std::string& vocab_name, const std::string& merges_name) {
  try {
    return BpeTokenizer(std::move(vocab));
  } catch (const ConfigError& e) {
    fail(e.argument == "merges" ? merges_name : vocab_name, e.what());
  } catch (const Utf8Error& e) {
    fail(vocab_name, e.what());
  }
}

bool is_absent_or(const json& object, const char* key, const json& allowed) {
  if (!object.contains(key) || object[key].is_null()) return true;
  return object[key] == allowed;
}

}  // namespace

BpeTokenizer parse_tokenizer_files(std::string_view vocab_json, std::string_view merges_txt,
                                   const std::string& vocab_name, const std::string& merges_name) {
  const json doc = parse_json(vocab_json, vocab_name);
  Vocab v = read_vocab(doc, 0, vocab_name, "the vocab");

  BpeVocab out;
  std::unordered_map<std::uint64_t, std::string> seen;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < merges_txt.size()) {
    std::size_t end = merges_txt.find('\n', pos);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.substr(0, 8) == "#version") continue;
    const std::string where = "line " + std::to_string(line_no);
    const std::size_t space = line.find(' ');
    if (line.empty() || space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      fail(merges_name, where + ": expected two pieces separated by one space, got " + shown(line));
    add_merge(v, std::string(line.substr(0, space)), std::string(line.substr(space + 1)), merges_name, where,
              vocab_name, seen, out);
  }
  if (const auto it = v.ids.find(kEndOfText); it != v.ids.end()) out.special_ids.push_back(it->second);
  out.pieces = std::move(v.pieces);
  return build(std::move(out), vocab_name, merges_name);
}

namespace {

// An unsupported type or option: a ConfigError whose argument is the field ("pre_tokenizer.type").
[[noreturn]] void refuse(const std::string& name, const std::string& field, const std::string& what) {
  throw ConfigError(field, name + ": " + field + " " + what);
}

// The steps of a component: a {"type": "Sequence", key: [...]} as its entries (nested sequences
// flattened), anything else as itself; each with the field that names it in messages.
void steps_of(const json& c, const std::string& field, const char* key, const std::string& name,
              std::vector<std::pair<const json*, std::string>>& out) {
  if (!c.is_object() || !c.contains("type") || !c["type"].is_string())
    fail(name, field + ": expected an object with a \"type\" string, got " + shown_json(c));
  if (c["type"] != "Sequence") {
    out.emplace_back(&c, field);
    return;
  }
  if (!c.contains(key) || !c[key].is_array())
    fail(name, field + ": a Sequence needs a \"" + key + "\" array, got " + shown_json(c));
  for (std::size_t i = 0; i < c[key].size(); ++i)
    steps_of(c[key][i], field + "." + key + "[" + std::to_string(i) + "]", key, name, out);
}

std::string string_field(const json& c, const char* key, const std::string& field, const std::string& name) {
  if (!c.contains(key) || !c[key].is_string())
    fail(name, field + "." + key + " must be a string, got " + shown_json(c.value(key, json())));
  return c[key].get<std::string>();
}

bool bool_field(const json& c, const char* key, bool absent, const std::string& field,
                const std::string& name) {
  if (!c.contains(key) || c[key].is_null()) return absent;
  if (!c[key].is_boolean())
    fail(name, field + "." + key + " must be true or false, got " + shown_json(c[key]));
  return c[key].get<bool>();
}

void read_normalizer(const json& doc, const std::string& name, BpeVocab& out) {
  if (!doc.contains("normalizer") || doc["normalizer"].is_null()) return;
  std::vector<std::pair<const json*, std::string>> steps;
  steps_of(doc["normalizer"], "normalizer", "normalizers", name, steps);
  for (const auto& [c, field] : steps) {
    const std::string type = (*c)["type"].get<std::string>();
    NormalizerStep s;
    if (type == "NFC") {
      s.kind = NormalizerStep::Kind::kNfc;
    } else if (type == "Prepend") {
      s.kind = NormalizerStep::Kind::kPrepend;
      s.text = string_field(*c, "prepend", field, name);
    } else if (type == "Replace") {
      s.kind = NormalizerStep::Kind::kReplace;
      const json pattern = c->value("pattern", json());
      if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string())
        refuse(name, field + ".pattern",
               "is " + shown_json(pattern) + ": only {\"String\": ...} patterns are supported");
      s.from = pattern["String"].get<std::string>();
      s.text = string_field(*c, "content", field, name);
      if (s.from.empty()) fail(name, field + ".pattern.String is empty");
    } else {
      refuse(name, field + ".type",
             "is " + shown_json((*c)["type"]) +
                 ": supported normalizers are NFC, Prepend, Replace and a Sequence of them");
    }
    out.normalizer.push_back(std::move(s));
  }
}

void read_pre_tokenizer(const json& doc, const std::string& name, BpeVocab& out) {
  out.pre_tokenizer.clear();
  if (!doc.contains("pre_tokenizer") || doc["pre_tokenizer"].is_null()) return;
  std::vector<std::pair<const json*, std::string>> steps;
  steps_of(doc["pre_tokenizer"], "pre_tokenizer", "pretokenizers", name, steps);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const json& c = *steps[i].first;
    const std::string& field = steps[i].second;
    const std::string type = c["type"].get<std::string>();
    PreTokenizerStep s;
    if (type == "Split") {
      s.kind = PreTokenizerStep::Kind::kSplit;
      const json pattern = c.value("pattern", json());
      if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
        refuse(name, field + ".pattern",
               "is " + shown_json(pattern) + ": only {\"Regex\": ...} patterns are supported");
      s.pattern = pattern["Regex"].get<std::string>();
      if (c.value("behavior", json()) != "Isolated")
        refuse(name, field + ".behavior",
               "is " + shown_json(c.value("behavior", json())) + ": only \"Isolated\" is supported");
      if (bool_field(c, "invert", false, field, name))
        refuse(name, field + ".invert", "is true: only false is supported");
      try {
        SplitPattern check(s.pattern);
      } catch (const ConfigError& e) {
        refuse(name, field + ".pattern.Regex", std::string("is not supported: ") + e.what());
      }
    } else if (type == "Digits") {
      s.kind = PreTokenizerStep::Kind::kDigits;
      s.individual_digits = bool_field(c, "individual_digits", false, field, name);
    } else if (type == "Metaspace") {
      s.kind = PreTokenizerStep::Kind::kMetaspace;
      s.replacement = string_field(c, "replacement", field, name);
      if (s.replacement.empty()) fail(name, field + ".replacement is empty");
      s.split = bool_field(c, "split", true, field, name);
      if (c.contains("prepend_scheme") && !c["prepend_scheme"].is_null()) {
        const json& p = c["prepend_scheme"];
        if (p == "always")
          s.prepend_scheme = PreTokenizerStep::Prepend::kAlways;
        else if (p == "first")
          s.prepend_scheme = PreTokenizerStep::Prepend::kFirst;
        else if (p == "never")
          s.prepend_scheme = PreTokenizerStep::Prepend::kNever;
        else
          refuse(name, field + ".prepend_scheme",
                 "is " + shown_json(p) + ": expected \"always\", \"first\" or \"never\"");
      } else {
        s.prepend_scheme = bool_field(c, "add_prefix_space", true, field, name)
                               ? PreTokenizerStep::Prepend::kAlways
                               : PreTokenizerStep::Prepend::kNever;
      }
    } else if (type == "ByteLevel") {
      s.kind = PreTokenizerStep::Kind::kByteLevel;
      s.add_prefix_space = bool_field(c, "add_prefix_space", true, field, name);
      s.use_regex = bool_field(c, "use_regex", true, field, name);
      if (i + 1 != steps.size())
        refuse(name, field + ".type", "is \"ByteLevel\" but is not the last pre-tokenizer step");
    } else {
      refuse(
          name, field + ".type",
          "is " + shown_json(c["type"]) +
              ": supported pre-tokenizers are Split (a Regex, Isolated), Digits, Metaspace, ByteLevel and a "
              "Sequence of them");
    }
    out.pre_tokenizer.push_back(std::move(s));
  }
}

// TemplateProcessing's "single" template as the ids before and after the text.
void read_template(const json& c, const std::string& field, const std::string& name, std::size_t n_ids,
                   BpeVocab& out) {
  const json single = c.value("single", json());
  const json specials = c.value("special_tokens", json::object());
  if (!single.is_array()) fail(name, field + ".single must be an array, got " + shown_json(single));
  if (!specials.is_object())
    fail(name, field + ".special_tokens must be an object, got " + shown_json(specials));
  bool seen_text = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const json& item = single[i];
    const std::string where = field + ".single[" + std::to_string(i) + "]";
    if (item.is_object() && item.contains("Sequence")) {
      if (!item["Sequence"].is_object() || item["Sequence"].value("id", json()) != "A" || seen_text)
        fail(name, where + ": expected the one sequence {\"id\": \"A\"}, got " + shown_json(item));
      seen_text = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
        !item["SpecialToken"]["id"].is_string())
      fail(name, where + ": expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}, got " +
                     shown_json(item));
    const std::string token = item["SpecialToken"]["id"].get<std::string>();
    if (!specials.contains(token) || !specials[token].contains("ids") || !specials[token]["ids"].is_array())
      fail(name, where + ": " + shown(token) + " has no ids in " + field + ".special_tokens");
    for (const json& id : specials[token]["ids"]) {
      if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= n_ids)
        fail(name, field + ".special_tokens " + shown(token) + ": id " + shown_json(id) +
                       " is not a token id (0.." + std::to_string(n_ids - 1) + ")");
      (seen_text ? out.suffix_ids : out.prefix_ids).push_back(std::int32_t(id.get<std::uint64_t>()));
    }
  }
  if (!seen_text) fail(name, field + ".single has no {\"Sequence\": {\"id\": \"A\"}}");
}

void read_post_processor(const json& doc, const std::string& name, std::size_t n_ids, BpeVocab& out) {
  if (!doc.contains("post_processor") || doc["post_processor"].is_null()) return;
  std::vector<std::pair<const json*, std::string>> steps;
  steps_of(doc["post_processor"], "post_processor", "processors", name, steps);
  bool templated = false;
  for (const auto& [c, field] : steps) {
    const json& type = (*c)["type"];
    if (type == "ByteLevel") continue;  // offsets only: the ids stay as they are
    if (type == "TemplateProcessing" && !templated) {
      templated = true;
      read_template(*c, field, name, n_ids, out);
      continue;
    }
    refuse(name, field + ".type",
           "is " + shown_json(type) +
               ": supported post-processors are ByteLevel, one TemplateProcessing and a Sequence of them");
  }
}

// The decoder must undo what the pieces stand for: ByteLevel for byte-level pieces; for character
// pieces a Metaspace decoder or Replace(space symbol -> " "), ByteFallback, Fuse, Strip(" ", 1, 0).
void read_decoder(const json& doc, const std::string& name, bool byte_level, BpeVocab& out) {
  if (!doc.contains("decoder") || doc["decoder"].is_null()) return;
  std::vector<std::pair<const json*, std::string>> steps;
  steps_of(doc["decoder"], "decoder", "decoders", name, steps);
  for (const auto& [c, field] : steps) {
    const std::string type = (*c)["type"].get<std::string>();
    const bool ok_here = byte_level ? type == "ByteLevel" : type != "ByteLevel";
    if (type == "ByteLevel" && ok_here) continue;
    if (type == "Metaspace" && ok_here) {
      out.space_symbol = string_field(*c, "replacement", field, name);
      const json scheme = c->value("prepend_scheme", json());
      out.decode_strips_leading_space =
          scheme.is_string() ? scheme != "never" : bool_field(*c, "add_prefix_space", true, field, name);
      continue;
    }
    if (type == "Replace" && ok_here) {
      const json pattern = c->value("pattern", json());
      if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
          c->value("content", json()) != " ")
        refuse(name, field,
               "is " + shown_json(*c) + ": only Replace({\"String\": symbol}, \" \") is supported");
      out.space_symbol = pattern["String"].get<std::string>();
      continue;
    }
    if ((type == "ByteFallback" || type == "Fuse") && ok_here) continue;
    if (type == "Strip" && ok_here) {
      const json start = c->value("start", json()), stop = c->value("stop", json());
      if (c->value("content", json()) != " " || !start.is_number_unsigned() ||
          start.get<std::uint64_t>() > 1 || stop != 0)
        refuse(name, field,
               "is " + shown_json(*c) + ": only Strip(\" \", start 0 or 1, stop 0) is supported");
      out.decode_strips_leading_space = start == 1;
      continue;
    }
    refuse(
        name, field + ".type",
        "is " + shown_json((*c)["type"]) +
            (byte_level ? ": a byte-level tokenizer is decoded by ByteLevel"
                        : ": supported decoders for character pieces are Metaspace, Replace, ByteFallback, "
                          "Fuse, Strip and a Sequence of them"));
  }
}

}  // namespace

BpeTokenizer parse_tokenizer_json(std::string_view text, const std::string& name) {
  const json doc = parse_json(text, name);
  if (!doc.is_object()) fail(name, std::string("expected a JSON object, got a ") + doc.type_name());
  if (!doc.contains("model") || !doc["model"].is_object()) fail(name, "no \"model\" object");
  const json& model = doc["model"];
  if (model.contains("type") && model["type"] != "BPE")
    refuse(name, "model.type",
           "is " + shown_json(model["type"]) +
               ": only \"BPE\" is supported (not Unigram, WordPiece or WordLevel)");
  const auto refuse_unless = [&](const json& object, const std::string& prefix, const char* key,
                                 const json& ok, const char* why) {
    if (!is_absent_or(object, key, ok))
      refuse(name, prefix + key, "is " + shown_json(object[key]) + ": " + why);
  };
  refuse_unless(model, "model.", "dropout", 0, "BPE dropout is not supported (it makes encoding random)");
  refuse_unless(model, "model.", "continuing_subword_prefix", "", "subword prefixes are not supported");
  refuse_unless(model, "model.", "end_of_word_suffix", "", "end-of-word suffixes are not supported");

  BpeVocab out;
  out.byte_fallback = bool_field(model, "byte_fallback", false, "model", name);
  out.ignore_merges = bool_field(model, "ignore_merges", false, "model", name);
  read_normalizer(doc, name, out);
  read_pre_tokenizer(doc, name, out);
  const bool byte_level =
      !out.pre_tokenizer.empty() && out.pre_tokenizer.back().kind == PreTokenizerStep::Kind::kByteLevel;
  if (byte_level && out.byte_fallback)
    refuse(name, "model.byte_fallback",
           "is true with a ByteLevel pre-tokenizer: byte-level pieces need no fallback");
  if (!byte_level && !out.byte_fallback)
    refuse(name, "pre_tokenizer",
           "has no ByteLevel step and model.byte_fallback is not true: only byte-level BPE and BPE over "
           "characters with byte fallback (SentencePiece's) are supported");
  read_decoder(doc, name, byte_level, out);

  if (!model.contains("vocab")) fail(name, "model has no \"vocab\"");
  if (!model.contains("merges") || !model["merges"].is_array())
    fail(name, "model.merges is missing or not an array");
  const json added = doc.value("added_tokens", json::array());
  if (!added.is_array()) fail(name, std::string("added_tokens must be an array, got a ") + added.type_name());

  // Added tokens missing from model.vocab take the ids after it.
  std::size_t extra = 0;
  const json& vocab_json = model["vocab"];
  for (std::size_t i = 0; i < added.size(); ++i) {
    const json& t = added[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() ||
        t["content"].get<std::string>().empty() || !t.contains("id") || !t["id"].is_number_unsigned())
      fail(name, where + ": expected {\"id\": non-negative integer, \"content\": non-empty string}, got " +
                     shown_json(t));
    for (const char* key : {"lstrip", "rstrip", "single_word"})
      if (bool_field(t, key, false, where, name))
        refuse(name, where + "." + key,
               "is true: added tokens that take in spaces or match whole words only are not supported");
    if (!vocab_json.is_object() || !vocab_json.contains(t["content"].get<std::string>())) ++extra;
  }
  Vocab v = read_vocab(vocab_json, extra, name, "model.vocab");
  const std::size_t n = v.pieces.size();
  for (std::size_t i = 0; i < added.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const std::string content = added[i]["content"].get<std::string>();
    const std::uint64_t id = added[i]["id"].get<std::uint64_t>();
    if (const auto it = v.ids.find(content); it != v.ids.end()) {
      if (std::uint64_t(it->second) != id)
        fail(name, where + " " + shown(content) + " has id " + std::to_string(id) +
                       " but model.vocab gives it " + std::to_string(it->second));
    } else {
      if (id >= n)
        fail(name, where + " " + shown(content) + ": id " + std::to_string(id) + " is out of range: with " +
                       std::to_string(n) + " tokens the ids run 0.." + std::to_string(n - 1));
      if (!v.pieces[id].empty())
        fail(name, where + " " + shown(content) + " and model.vocab entry " + shown(v.pieces[id]) +
                       " both have id " + std::to_string(id));
      v.pieces[id] = content;
      v.ids.emplace(content, std::int32_t(id));
    }
    out.special_ids.push_back(std::int32_t(id));
  }
  for (std::size_t id = 0; id < n; ++id)
    if (v.pieces[id].empty())
      fail(name, "id " + std::to_string(id) + " is in neither model.vocab nor added_tokens");
  read_post_processor(doc, name, n, out);

  std::unordered_map<std::uint64_t, std::string> seen;
  const json& merges = model["merges"];
  out.merges.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const std::size_t space = s.find(' ');
      if (space == 0 || space == std::string::npos || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos)
        fail(name, where + ": expected \"left right\" (one space), got " + shown_json(m));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail(name, where + ": expected \"left right\" or [\"left\", \"right\"], got " + shown_json(m));
    }
    add_merge(v, std::move(left), std::move(right), name, where, "model.vocab", seen, out);
  }
  out.pieces = std::move(v.pieces);
  return build(std::move(out), name, name);
}

BpeTokenizer read_tokenizer_files(const std::string& vocab_json_path, const std::string& merges_txt_path) {
  const std::string vocab = read_bounded(vocab_json_path);
  const std::string merges = read_bounded(merges_txt_path);
  return parse_tokenizer_files(vocab, merges, vocab_json_path, merges_txt_path);
}

BpeTokenizer read_tokenizer_json(const std::string& path) {
  return parse_tokenizer_json(read_bounded(path), path);
}

BpeTokenizer load_tokenizer(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) fail(folder, "not a folder");
  const fs::path dir(folder);
  const auto present = [&](const char* file) { return fs::exists(dir / file, ec); };
  if (present("tokenizer.json")) return read_tokenizer_json((dir / "tokenizer.json").string());
  const bool vocab = present("vocab.json"), merges = present("merges.txt");
  if (vocab && merges)
    return read_tokenizer_files((dir / "vocab.json").string(), (dir / "merges.txt").string());
  std::string found;
  if (vocab) found = "; vocab.json is there but merges.txt is not";
  if (merges) found = "; merges.txt is there but vocab.json is not";
  fail(folder, "no tokenizer: looked for tokenizer.json, or vocab.json with merges.txt" + found);
}

}  // namespace mha
