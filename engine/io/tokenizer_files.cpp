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

BpeTokenizer parse_tokenizer_json(std::string_view text, const std::string& name) {
  const json doc = parse_json(text, name);
  if (!doc.is_object()) fail(name, std::string("expected a JSON object, got a ") + doc.type_name());
  if (!doc.contains("model") || !doc["model"].is_object()) fail(name, "no \"model\" object");
  const json& model = doc["model"];
  if (model.contains("type") && model["type"] != "BPE")
    fail(name, "model.type is " + shown_json(model["type"]) + "; only \"BPE\" is supported");
  const auto refuse_unless = [&](const json& object, const std::string& prefix, const char* key,
                                 const json& ok, const char* why) {
    if (!is_absent_or(object, key, ok))
      fail(name, prefix + key + " is " + shown_json(object[key]) + ": " + why);
  };
  refuse_unless(model, "model.", "dropout", 0, "BPE dropout is not supported (it makes encoding random)");
  refuse_unless(model, "model.", "continuing_subword_prefix", "", "subword prefixes are not supported");
  refuse_unless(model, "model.", "end_of_word_suffix", "", "end-of-word suffixes are not supported");
  refuse_unless(model, "model.", "byte_fallback", false, "byte fallback is not supported");
  refuse_unless(model, "model.", "ignore_merges", false, "ignore_merges is not supported");
  refuse_unless(doc, "", "normalizer", json(), "normalizers are not supported (GPT-2 has none)");
  const char* pre_why =
      "only GPT-2's pre-tokenizer is supported: {\"type\": \"ByteLevel\", \"add_prefix_space\": false}";
  if (!doc.contains("pre_tokenizer") || !doc["pre_tokenizer"].is_object())
    fail(name, std::string("pre_tokenizer is missing or not an object: ") + pre_why);
  const json& pre = doc["pre_tokenizer"];
  if (!pre.contains("type") || pre["type"] != "ByteLevel")
    fail(name, "pre_tokenizer.type is " + shown_json(pre.value("type", json())) + ": " + pre_why);
  refuse_unless(pre, "pre_tokenizer.", "add_prefix_space", false, pre_why);
  refuse_unless(pre, "pre_tokenizer.", "use_regex", true, pre_why);

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
    if (!vocab_json.is_object() || !vocab_json.contains(t["content"].get<std::string>())) ++extra;
  }
  Vocab v = read_vocab(vocab_json, extra, name, "model.vocab");
  BpeVocab out;
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
