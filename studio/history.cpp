// Undo/redo stacks of scenario snapshots.
#include "history.hpp"

namespace mha::studio {

void History::push(const Scenario& before, const std::string& what) {
  undo_.push_back({before, what});
  if (undo_.size() > limit_) undo_.erase(undo_.begin());
  redo_.clear();
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
