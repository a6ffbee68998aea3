// Undo/redo as whole-scenario snapshots: scenarios are small (KBs at teaching sizes), and a
// snapshot can never get out of step with the state it restores.
#pragma once

#include <string>
#include <vector>

#include "scenario.hpp"

namespace mha::studio {

class History {
 public:
  explicit History(std::size_t limit = 200) : limit_(limit) {}
  // Records `before` as the state to return to on undo; clears redo.
  void push(const Scenario& before, const std::string& what);
  bool can_undo() const { return !undo_.empty(); }
  bool can_redo() const { return !redo_.empty(); }
  // Swap `current` with the previous/next snapshot; returns the edit's name ("" if none).
  std::string undo(Scenario& current);
  std::string redo(Scenario& current);
  void clear() {
    undo_.clear();
    redo_.clear();
  }

 private:
  struct Entry {
    Scenario scenario;
    std::string what;
  };
  std::size_t limit_;
  std::vector<Entry> undo_, redo_;
};

}  // namespace mha::studio
