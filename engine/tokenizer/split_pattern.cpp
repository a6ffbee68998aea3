// The split-pattern reader (a recursive-descent parser into sets, sequences and groups) and its
// backtracking matcher. A set's run is taken greedily and given back one code point at a time, a
// group's alternatives are tried in order, as JavaScript's and Oniguruma's engines do, so the
// leftmost-first match is the one those engines return.
#include "tokenizer/split_pattern.hpp"

#include <cctype>
#include <cstdint>
#include <limits>
#include <utility>

#include "errors.hpp"
#include "tokenizer/utf8.hpp"

namespace mha {

namespace {

constexpr std::size_t kUnbounded = std::numeric_limits<std::size_t>::max();

struct CharSet {
  bool negated = false;
  bool letter = false, number = false, space = false;              // \p{L}, \p{N}, \s
  bool not_letter = false, not_number = false, not_space = false;  // \P{L}, \P{N}, \S
  std::vector<std::pair<char32_t, char32_t>> ranges;

  bool contains(char32_t c, utf8::Class k) const {
    bool in = (letter && k == utf8::kLetter) || (number && k == utf8::kNumber) ||
              (space && k == utf8::kSpace) || (not_letter && k != utf8::kLetter) ||
              (not_number && k != utf8::kNumber) || (not_space && k != utf8::kSpace);
    for (std::size_t i = 0; !in && i < ranges.size(); ++i) in = c >= ranges[i].first && c <= ranges[i].second;
    return in != negated;
  }
};

struct Item {
  enum Kind { kSet, kGroup, kLookahead, kNegativeLookahead } kind;
  std::size_t index;  // into Program::sets or Program::groups
  std::size_t min = 1, max = 1;
};

struct Seq {
  std::vector<Item> items;
};

struct Group {
  std::vector<Seq> branches;
};

}  // namespace

struct SplitPattern::Program {
  std::vector<CharSet> sets;
  std::vector<Group> groups;
  std::size_t top = 0;
};

namespace {

class Parser {
 public:
  Parser(const std::string& src, SplitPattern::Program& prog) : src_(src), prog_(prog) {}

  std::size_t parse() {
    const std::size_t top = parse_alternatives(false);
    if (pos_ < src_.size()) refuse("an unmatched ')'", pos_);
    if (min_length(top) == 0) refuse("alternatives that can match the empty string", 0);
    return top;
  }

 private:
  [[noreturn]] void refuse(const std::string& what, std::size_t at) const {
    throw ConfigError("pattern", "the split pattern '" + src_ + "' has " + what + " at byte " +
                                     std::to_string(at) + ", which is not supported");
  }

  bool at(char c) const { return pos_ < src_.size() && src_[pos_] == c; }
  bool starts(std::string_view s) const { return std::string_view(src_).substr(pos_, s.size()) == s; }

  char32_t next_code_point() {
    char32_t cp = 0;
    const auto* p = reinterpret_cast<const unsigned char*>(src_.data()) + pos_;
    const int len = utf8::char_at(p, src_.size() - pos_, cp);
    if (len == 0) refuse("invalid UTF-8", pos_);
    pos_ += std::size_t(len);
    return cp;
  }

  std::size_t parse_alternatives(bool icase) {
    Group g;
    g.branches.push_back(parse_sequence(icase));
    while (at('|')) {
      ++pos_;
      g.branches.push_back(parse_sequence(icase));
    }
    prog_.groups.push_back(std::move(g));
    return prog_.groups.size() - 1;
  }

  Seq parse_sequence(bool icase) {
    Seq s;
    while (pos_ < src_.size() && !at('|') && !at(')')) s.items.push_back(parse_item(icase));
    return s;
  }

  std::size_t add_set(CharSet set) {
    prog_.sets.push_back(std::move(set));
    return prog_.sets.size() - 1;
  }

  // A literal code point as a set; in (?i:…) an ASCII letter stands for both its cases.
  void add_literal(CharSet& set, char32_t cp, bool icase, std::size_t where) const {
    set.ranges.emplace_back(cp, cp);
    if (!icase) return;
    if ((cp >= U'a' && cp <= U'z') || (cp >= U'A' && cp <= U'Z')) {
      const char32_t other = cp ^ 0x20;
      set.ranges.emplace_back(other, other);
    } else if (cp >= 0x80 && utf8::classify(cp) == utf8::kLetter) {
      refuse("a non-ASCII letter in a case-insensitive group", where);
    }
  }

  // After '\': a class escape into `set`, or a literal (returned through `literal`).
  bool parse_escape(CharSet& set, char32_t& literal) {
    const std::size_t start = pos_ - 1;
    if (pos_ >= src_.size()) refuse("a '\\' at the end", start);
    const char c = src_[pos_++];
    switch (c) {
      case 's': set.space = true; return true;
      case 'S': set.not_space = true; return true;
      case 'p':
      case 'P': {
        const bool upper = c == 'P';
        if (starts("{L}")) {
          (upper ? set.not_letter : set.letter) = true;
        } else if (starts("{N}")) {
          (upper ? set.not_number : set.number) = true;
        } else {
          const std::size_t close = src_.find('}', pos_);
          refuse("the class '" + src_.substr(start, close == std::string::npos ? 2 : close + 1 - start) +
                     "' (only \\p{L}, \\p{N}, \\P{L} and \\P{N} are)",
                 start);
        }
        pos_ += 3;
        return true;
      }
      case 'r': literal = U'\r'; return false;
      case 'n': literal = U'\n'; return false;
      case 't': literal = U'\t'; return false;
      case 'f': literal = U'\f'; return false;
      case 'v': literal = U'\v'; return false;
      default:
        if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c)) &&
            c > 0x20) {
          literal = char32_t(c);
          return false;
        }
        refuse(std::string("the escape '\\") + c + "'", start);
    }
  }

  std::size_t parse_class(bool icase) {
    const std::size_t start = pos_ - 1;
    CharSet set;
    if (at('^')) {
      set.negated = true;
      ++pos_;
    }
    bool empty = true;
    while (!at(']')) {
      if (pos_ >= src_.size()) refuse("a '[' that is never closed", start);
      if (at('[')) refuse("a '[' inside a class", pos_);
      const std::size_t where = pos_;
      char32_t first = 0;
      if (at('\\')) {
        ++pos_;
        if (parse_escape(set, first)) {
          empty = false;
          continue;
        }
      } else {
        first = next_code_point();
      }
      empty = false;
      if (at('-') && pos_ + 1 < src_.size() && src_[pos_ + 1] != ']') {
        ++pos_;
        char32_t last = 0;
        if (at('\\')) {
          ++pos_;
          if (parse_escape(set, last)) refuse("a range that ends in a class", where);
        } else {
          last = next_code_point();
        }
        if (last < first) refuse("a range out of order", where);
        if (icase && first != last) refuse("a range in a case-insensitive group", where);
        set.ranges.emplace_back(first, last);
        continue;
      }
      add_literal(set, first, icase, where);
    }
    if (empty) refuse("an empty class", start);
    ++pos_;  // ']'
    return add_set(std::move(set));
  }

  Item parse_item(bool icase) {
    const std::size_t start = pos_;
    Item item{Item::kSet, 0};
    const char c = src_[pos_];
    if (c == '(') {
      bool inner_icase = icase;
      if (starts("(?:")) {
        pos_ += 3;
        item.kind = Item::kGroup;
      } else if (starts("(?i:")) {
        pos_ += 4;
        item.kind = Item::kGroup;
        inner_icase = true;
      } else if (starts("(?!")) {
        pos_ += 3;
        item.kind = Item::kNegativeLookahead;
      } else if (starts("(?=")) {
        pos_ += 3;
        item.kind = Item::kLookahead;
      } else if (starts("(?")) {
        refuse("the group '" + src_.substr(pos_, 3) + "'", pos_);
      } else {
        pos_ += 1;
        item.kind = Item::kGroup;
      }
      item.index = parse_alternatives(inner_icase);
      if (!at(')')) refuse("a '(' that is never closed", start);
      ++pos_;
    } else if (c == '[') {
      ++pos_;
      item.index = parse_class(icase);
    } else if (c == '\\') {
      ++pos_;
      CharSet set;
      char32_t literal = 0;
      if (!parse_escape(set, literal)) add_literal(set, literal, icase, start);
      item.index = add_set(std::move(set));
    } else if (c == '.' || c == '^' || c == '$') {
      refuse(std::string("'") + c + "'", pos_);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      refuse(std::string("a quantifier '") + c + "' with nothing before it", pos_);
    } else {
      CharSet set;
      add_literal(set, next_code_point(), icase, start);
      item.index = add_set(std::move(set));
    }
    parse_quantifier(item);
    return item;
  }

  void parse_quantifier(Item& item) {
    if (pos_ >= src_.size()) return;
    const std::size_t start = pos_;
    const char c = src_[pos_];
    if (c == '?') {
      item.min = 0;
    } else if (c == '*') {
      item.min = 0, item.max = kUnbounded;
    } else if (c == '+') {
      item.max = kUnbounded;
    } else if (c == '{') {
      const std::size_t close = src_.find('}', pos_);
      if (close == std::string::npos) refuse("a '{' that is never closed", pos_);
      const std::string body = src_.substr(pos_ + 1, close - pos_ - 1);
      const std::size_t comma = body.find(',');
      auto number = [&](const std::string& digits) {
        if (digits.empty() || digits.size() > 4 ||
            digits.find_first_not_of("0123456789") != std::string::npos)
          refuse("the quantifier '{" + body + "}'", start);
        return std::size_t(std::stoul(digits));
      };
      item.min = number(body.substr(0, comma));
      item.max = comma == std::string::npos ? item.min
                 : comma + 1 == body.size() ? kUnbounded
                                            : number(body.substr(comma + 1));
      if (item.max < item.min || item.max == 0) refuse("the quantifier '{" + body + "}'", start);
      pos_ = close;
    } else {
      return;
    }
    ++pos_;
    if (item.kind == Item::kLookahead || item.kind == Item::kNegativeLookahead)
      refuse("a quantifier on a lookahead", start);
    if (item.kind == Item::kGroup && !(item.min == 0 && item.max == 1))
      refuse("a quantifier other than '?' on a group", start);
    if (at('?') || at('+')) refuse("a lazy or possessive quantifier", pos_);
  }

  std::size_t min_length(std::size_t group) const {
    std::size_t best = kUnbounded;
    for (const Seq& s : prog_.groups[group].branches) {
      std::size_t len = 0;
      for (const Item& it : s.items) {
        if (it.kind == Item::kSet) len += it.min;
        if (it.kind == Item::kGroup && it.min > 0) len += min_length(it.index);
      }
      best = std::min(best, len);
    }
    return best;
  }

  const std::string& src_;
  SplitPattern::Program& prog_;
  std::size_t pos_ = 0;
};

// What is left to match: the items of `seq` from `k` on, then `next`'s.
struct Frame {
  const Seq* seq;
  std::size_t k;
  const Frame* next;
};

class Matcher {
 public:
  Matcher(const SplitPattern::Program& prog, const utf8::CodePoints& text) : prog_(prog), t_(text) {}

  // End of the first match of `group`'s alternatives at `pos`, or kUnbounded.
  std::size_t match(std::size_t group, std::size_t pos) const {
    std::size_t end = 0;
    for (const Seq& b : prog_.groups[group].branches) {
      const Frame f{&b, 0, nullptr};
      if (run(&f, pos, end)) return end;
    }
    return kUnbounded;
  }

 private:
  bool run(const Frame* f, std::size_t pos, std::size_t& end) const {
    while (f && f->k == f->seq->items.size()) f = f->next;
    if (!f) {
      end = pos;
      return true;
    }
    const Item& it = f->seq->items[f->k];
    const Frame rest{f->seq, f->k + 1, f->next};
    switch (it.kind) {
      case Item::kSet: {
        const CharSet& set = prog_.sets[it.index];
        const std::size_t n_text = t_.cp.size();
        std::size_t n = 0;
        while (n < it.max && pos + n < n_text && set.contains(t_.cp[pos + n], t_.cls[pos + n])) ++n;
        if (n < it.min) return false;
        for (std::size_t c = n + 1; c-- > it.min;)  // greedy: the longest run first
          if (run(&rest, pos + c, end)) return true;
        return false;
      }
      case Item::kGroup:
        for (const Seq& b : prog_.groups[it.index].branches) {
          const Frame inner{&b, 0, &rest};
          if (run(&inner, pos, end)) return true;
        }
        return it.min == 0 && run(&rest, pos, end);
      case Item::kLookahead:
      case Item::kNegativeLookahead: {
        const bool found = match(it.index, pos) != kUnbounded;
        if (found != (it.kind == Item::kLookahead)) return false;
        return run(&rest, pos, end);
      }
    }
    return false;
  }

  const SplitPattern::Program& prog_;
  const utf8::CodePoints& t_;
};

}  // namespace

SplitPattern::SplitPattern(std::string pattern) : source_(std::move(pattern)) {
  auto prog = std::make_shared<Program>();
  prog->top = Parser(source_, *prog).parse();
  program_ = std::move(prog);
}

void SplitPattern::split(std::string_view text, std::vector<std::string_view>& out) const {
  utf8::CodePoints t;
  utf8::decode_valid(text, t);
  const Matcher m(*program_, t);
  const std::size_t n = t.cp.size();
  std::size_t gap = 0, pos = 0;
  auto piece = [&](std::size_t from, std::size_t to) {
    out.push_back(text.substr(t.offset[from], t.offset[to] - t.offset[from]));
  };
  while (pos < n) {
    const std::size_t end = m.match(program_->top, pos);
    if (end == kUnbounded || end == pos) {
      ++pos;
      continue;
    }
    if (gap < pos) piece(gap, pos);
    piece(pos, end);
    pos = gap = end;
  }
  if (gap < n) piece(gap, n);
}

}  // namespace mha
