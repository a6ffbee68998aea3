// Undo/redo stacks of scenario snapshots.
#include "history.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace mha::studio {

namespace {

// Masks below this many cells stay floats: packing them saves little.
constexpr std::size_t kPackFrom = 4096;

// Whether every cell is +0 or -inf, bit for bit (a -0 or a NaN is kept as floats).
constexpr std::uint32_t kOpenBits = 0x00000000u, kBlockedBits = 0xff800000u;

std::uint32_t bits_of(float c) {
  std::uint32_t b;
  std::memcpy(&b, &c, sizeof b);
  return b;
}

bool all_blocked_or_open(const std::vector<float>& cells) {
  unsigned other = 0;  // a loop the compiler vectorises: no early exit
  for (float c : cells) other |= unsigned(bits_of(c) != kOpenBits) & unsigned(bits_of(c) != kBlockedBits);
  return other == 0;
}

}  // namespace

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
  return bytes(e.scenario) + e.blocked.size() * sizeof(std::uint64_t);
}

std::size_t History::bytes() const {
  std::size_t total = 0;
  for (const Entry& e : redo_) total += bytes(e);
  for (const Entry& e : undo_) total += bytes(e);
  return total;
}

History::Entry History::snapshot(Scenario& s) {
  Entry e;
  if (s.mask.cells.size() < kPackFrom || !all_blocked_or_open(s.mask.cells)) {
    e.scenario = s;
    return e;
  }
  {  // every field but the cells, which are lent out meanwhile (and back whatever happens)
    struct Lent {
      std::vector<float>& home;
      std::vector<float> cells;
      ~Lent() { home.swap(cells); }
    } lent{s.mask.cells, {}};
    lent.cells.swap(s.mask.cells);
    e.scenario = s;
  }
  const std::vector<float>& cells = s.mask.cells;
  e.cells = cells.size();
  e.blocked.assign((cells.size() + 63) / 64, 0);
  for (std::size_t w = 0; w < e.blocked.size(); ++w) {
    const std::size_t i0 = w * 64, i1 = std::min(cells.size(), i0 + 64);
    std::uint64_t bits = 0;
    for (std::size_t i = i0; i < i1; ++i)
      bits |= std::uint64_t(bits_of(cells[i]) == kBlockedBits) << (i - i0);
    e.blocked[w] = bits;
  }
  return e;
}

namespace {

void unpack(const History::Entry& e, std::vector<float>& storage) {
  storage.resize(e.cells);
  for (std::size_t i = 0; i < e.cells; ++i)
    storage[i] = (e.blocked[i / 64] >> (i % 64)) & 1 ? kMaskBlocked : 0.0f;
}

}  // namespace

void History::restore(const Entry& e, Scenario& current) {
  std::vector<float> storage = std::move(current.mask.cells);
  current = e.scenario;  // its cells are empty when the bits hold them
  if (e.cells == 0) return;
  unpack(e, storage);
  current.mask.cells = std::move(storage);
}

void History::restore(Entry&& e, Scenario& current) {
  std::vector<float> storage = std::move(current.mask.cells);
  current = std::move(e.scenario);
  if (e.cells == 0) return;
  unpack(e, storage);
  current.mask.cells = std::move(storage);
}

void History::trim() {
  std::size_t total = bytes();
  std::size_t drop = 0;
  while (undo_.size() - drop > 1 && (undo_.size() - drop > limit_ || total > byte_limit_))
    total -= bytes(undo_[drop++]);
  undo_.erase(undo_.begin(), undo_.begin() + std::ptrdiff_t(drop));
}

void History::push(Entry before, const std::string& what) {
  before.what = what;
  undo_.push_back(std::move(before));
  redo_.clear();
  trim();
}

std::string History::step(std::vector<Entry>& from, std::vector<Entry>& to, Scenario& current) {
  if (from.empty()) return "";
  Entry e = std::move(from.back());
  from.pop_back();
  Entry now = snapshot(current);
  now.what = e.what;
  to.push_back(std::move(now));
  const std::string what = e.what;
  restore(std::move(e), current);
  return what;
}

std::string History::undo(Scenario& current) {
  return step(undo_, redo_, current);
}

std::string History::redo(Scenario& current) {
  return step(redo_, undo_, current);
}

}  // namespace mha::studio
