// Scenario snapshots, and the undo/redo stacks of them.
#include "history.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "masks.hpp"

namespace mha::studio {

namespace {

// Masks below this many cells stay floats: packing them saves little.
constexpr std::size_t kPackFrom = 4096;

// What an undo step may keep as rows, in groups restored together: each edited input alone, the
// weights as one, the mask's bits.
enum class Group { query, key, value, weights, mask };
constexpr Group kGroups[] = {Group::query, Group::key, Group::value, Group::weights, Group::mask};
constexpr std::size_t kMaskRowBytes = 64;  // 512 cells of bits

std::optional<Tensor<float>>& input(Scenario& s, Group g) {
  return g == Group::query ? s.query : g == Group::key ? s.key : s.value;
}

Group group_of(const std::string& patch_name) {
  if (patch_name == "query") return Group::query;
  if (patch_name == "key") return Group::key;
  if (patch_name == "value") return Group::value;
  if (patch_name == "mask") return Group::mask;
  return Group::weights;
}

// One tensor (or the bits) of a group, as bytes in rows.
struct Part {
  std::string name;
  unsigned char* data;
  std::size_t bytes, row_bytes;
  Shape shape;
};

// The group's parts in `s`; none when s does not hold the group. (Only read through a const
// snapshot: state_dict hands out mutable pointers.)
std::vector<Part> parts(Snapshot& s, Group g) {
  auto tensor_part = [](std::string name, Tensor<float>& t) {
    const std::size_t row = t.shape.empty() ? 1 : std::size_t(std::max<std::int64_t>(1, t.shape.back()));
    return Part{std::move(name), reinterpret_cast<unsigned char*>(t.data.data()),
                t.data.size() * sizeof(float), row * sizeof(float), t.shape};
  };
  std::vector<Part> out;
  switch (g) {
    case Group::query:
    case Group::key:
    case Group::value:
      if (std::optional<Tensor<float>>& t = input(s.scenario, g))
        out.push_back(tensor_part(g == Group::query ? "query" : g == Group::key ? "key" : "value", *t));
      break;
    case Group::weights:
      if (s.scenario.weights)
        for (const auto& [name, t] : state_dict(*s.scenario.weights))
          out.push_back(tensor_part(std::string("weights.") + name, *t));
      break;
    case Group::mask:
      if (s.cells)
        out.push_back({"mask",
                       reinterpret_cast<unsigned char*>(s.blocked.data()),
                       s.blocked.size() * sizeof(std::uint64_t),
                       kMaskRowBytes,
                       {std::int64_t(s.cells)}});
      break;
  }
  return out;
}

bool same_layout(const std::vector<Part>& a, const std::vector<Part>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].shape != b[i].shape || a[i].bytes != b[i].bytes ||
        a[i].row_bytes != b[i].row_bytes)
      return false;
  return true;
}

// The group's values from `from` into `to` (which lacks them).
void copy_group(const Snapshot& from, Snapshot& to, Group g) {
  switch (g) {
    case Group::query:
    case Group::key:
    case Group::value: input(to.scenario, g) = input(const_cast<Scenario&>(from.scenario), g); break;
    case Group::weights: to.scenario.weights = from.scenario.weights; break;
    case Group::mask:
      to.blocked = from.blocked;
      to.cells = from.cells;
      break;
  }
}

void drop_group(Snapshot& s, Group g) {
  switch (g) {
    case Group::query:
    case Group::key:
    case Group::value: input(s.scenario, g).reset(); break;
    case Group::weights: s.scenario.weights.reset(); break;
    case Group::mask:
      s.blocked = {};
      s.cells = 0;
      break;
  }
}

std::size_t row_length(const Part& p, std::size_t row) {
  return std::min(p.row_bytes, p.bytes - row * p.row_bytes);
}

}  // namespace

Snapshot Snapshot::of(Scenario& s) {
  Snapshot out;
  std::vector<float>& cells = s.mask.cells;
  if (cells.size() >= kPackFrom) {
    std::vector<std::uint64_t> bits((cells.size() + 63) / 64);
    if (pack_blocked(cells.data(), cells.size(), bits.data())) {
      // Every field but the cells, which are lent out meanwhile (and back whatever happens).
      struct Lent {
        std::vector<float>& home;
        std::vector<float> cells;
        ~Lent() { home.swap(cells); }
      } lent{cells, {}};
      lent.cells.swap(cells);
      out.scenario = s;
      out.blocked = std::move(bits);
      out.cells = lent.cells.size();
      return out;
    }
  }
  out.scenario = s;
  return out;
}

void Snapshot::restore(Scenario& current) const {
  std::vector<float> storage = std::move(current.mask.cells);
  current = scenario;  // its cells are empty when the bits hold them
  if (cells == 0) return;
  storage.resize(cells);
  unpack_blocked(blocked.data(), cells, kMaskBlocked, 0.0f, storage.data());
  current.mask.cells = std::move(storage);
}

Scenario Snapshot::unpacked() const {
  Scenario s;
  restore(s);
  return s;
}

std::size_t Snapshot::bytes() const {
  return History::bytes(scenario) + blocked.size() * sizeof(std::uint64_t);
}

std::size_t History::bytes(const Scenario& s) {
  std::size_t n = s.mask.cells.size() * sizeof(float) + s.mask.key_padding.size();
  for (const std::optional<Tensor<float>>* t : {&s.query, &s.key, &s.value})
    if (*t) n += (*t)->data.size() * sizeof(float);
  if (s.weights)
    for (const auto& [name, t] : state_dict(const_cast<Weights<float>&>(*s.weights)))
      n += t->data.size() * sizeof(float);
  return n;
}

std::size_t History::bytes(const Entry& e) {
  std::size_t n = e.state->bytes();
  for (const Patch& p : e.patches) n += p.bytes.size() + p.rows.size() * sizeof(std::uint32_t);
  return n;
}

std::size_t History::bytes() const {
  std::size_t total = 0;
  for (const Entry& e : redo_) total += bytes(e);
  for (const Entry& e : undo_) total += bytes(e);
  return total;
}

void History::make_relative(Entry& e, const Snapshot& after) {
  if (e.relative) return;
  if (e.state.use_count() > 1) e.state = std::make_shared<Snapshot>(*e.state);  // the worker's too
  Snapshot& s = *e.state;
  for (Group g : kGroups) {
    const std::vector<Part> mine = parts(s, g), theirs = parts(const_cast<Snapshot&>(after), g);
    if (mine.empty() || !same_layout(mine, theirs)) continue;  // kept whole
    for (std::size_t i = 0; i < mine.size(); ++i) {
      const Part &m = mine[i], &t = theirs[i];
      Patch p;
      p.name = m.name;
      p.row_bytes = m.row_bytes;
      for (std::size_t r = 0; r * m.row_bytes < m.bytes; ++r) {
        const std::size_t at = r * m.row_bytes, n = row_length(m, r);
        if (std::memcmp(m.data + at, t.data + at, n) == 0) continue;
        p.rows.push_back(std::uint32_t(r));
        p.bytes.insert(p.bytes.end(), m.data + at, m.data + at + n);
      }
      e.patches.push_back(std::move(p));
    }
    drop_group(s, g);
  }
  e.relative = true;
}

std::optional<Snapshot> History::state_of(const Entry& e, const Snapshot& after) {
  Snapshot out = *e.state;
  if (!e.relative) return out;
  for (Group g : kGroups) {
    std::vector<const Patch*> mine;
    for (const Patch& p : e.patches)
      if (group_of(p.name) == g) mine.push_back(&p);
    if (mine.empty()) continue;
    copy_group(after, out, g);
    const std::vector<Part> target = parts(out, g);
    if (target.size() != mine.size()) return std::nullopt;
    for (std::size_t i = 0; i < target.size(); ++i) {
      const Part& t = target[i];
      const Patch& p = *mine[i];
      if (p.name != t.name || p.row_bytes != t.row_bytes) return std::nullopt;
      std::size_t from = 0;
      for (std::uint32_t r : p.rows) {
        if (std::size_t(r) * t.row_bytes >= t.bytes) return std::nullopt;
        const std::size_t n = row_length(t, r);
        if (from + n > p.bytes.size()) return std::nullopt;
        std::memcpy(t.data + std::size_t(r) * t.row_bytes, p.bytes.data() + from, n);
        from += n;
      }
    }
  }
  return out;
}

void History::trim() {
  std::size_t total = bytes();
  std::size_t drop = 0;
  while (undo_.size() - drop > 1 && (undo_.size() - drop > limit_ || total > byte_limit_))
    total -= bytes(undo_[drop++]);
  undo_.erase(undo_.begin(), undo_.begin() + std::ptrdiff_t(drop));
}

void History::push(std::shared_ptr<Snapshot> before, const std::string& what) {
  // The step below is done changing: the state after it is `before`.
  if (!undo_.empty()) make_relative(undo_.back(), *before);
  Entry e;
  e.state = std::move(before);
  e.what = what;
  undo_.push_back(std::move(e));
  redo_.clear();
  trim();
}

std::string History::step(std::vector<Entry>& from, std::vector<Entry>& to, Scenario& current) {
  if (from.empty()) return "";
  Entry e = std::move(from.back());
  from.pop_back();
  Entry back;
  back.state = std::make_shared<Snapshot>(Snapshot::of(current));
  back.what = e.what;
  const std::optional<Snapshot> restored = state_of(e, *back.state);
  if (!restored) {  // `current` is not the state the step was made against: nothing can be restored
    clear();
    return "";
  }
  make_relative(back, *restored);
  to.push_back(std::move(back));
  // Undo and redo step through the work; how it is looked at (the batch item, the stage, the reshape
  // step) stays as it is on screen.
  ViewState view = std::move(current.view);
  restored->restore(current);
  current.view = std::move(view);
  return e.what;
}

std::string History::undo(Scenario& current) {
  return step(undo_, redo_, current);
}

std::string History::redo(Scenario& current) {
  return step(redo_, undo_, current);
}

}  // namespace mha::studio
