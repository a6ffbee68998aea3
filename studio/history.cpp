// Undo/redo stacks of scenario snapshots.
#include "history.hpp"

namespace mha::studio {

std::size_t History::bytes(const Scenario& s) {
  std::size_t n = s.mask.cells.size() * sizeof(float) + s.mask.key_padding.size();
  for (const std::optional<Tensor<float>>* t : {&s.query, &s.key, &s.value})
    if (*t) n += (*t)->data.size() * sizeof(float);
  if (s.weights)
    for (const auto& [name, t] : state_dict(const_cast<Weights<float>&>(*s.weights)))
      n += t->data.size() * sizeof(float);
  return n;
}

void History::trim() {
  std::size_t total = 0;
  for (const Entry& e : redo_) total += bytes(e.scenario);
  for (const Entry& e : undo_) total += bytes(e.scenario);
  std::size_t drop = 0;
  while (undo_.size() - drop > 1 && (undo_.size() - drop > limit_ || total > byte_limit_))
    total -= bytes(undo_[drop++].scenario);
  undo_.erase(undo_.begin(), undo_.begin() + std::ptrdiff_t(drop));
}

void History::push(const Scenario& before, const std::string& what) {
  undo_.push_back({before, what});
  redo_.clear();
  trim();
}

std::string History::undo(Scenario& current) {
  if (undo_.empty()) return "";
  Entry e = std::move(undo_.back());
  undo_.pop_back();
  redo_.push_back({current, e.what});
  current = std::move(e.scenario);
  return e.what;
}

std::string History::redo(Scenario& current) {
  if (redo_.empty()) return "";
  Entry e = std::move(redo_.back());
  redo_.pop_back();
  undo_.push_back({current, e.what});
  current = std::move(e.scenario);
  return e.what;
}

}  // namespace mha::studio
