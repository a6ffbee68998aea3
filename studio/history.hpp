// Undo/redo as whole-scenario snapshots: scenarios are small (KBs at teaching sizes), and a
// snapshot can never get out of step with the state it restores. At large sizes a snapshot holds
// the whole mask (L·S floats: 16 MiB at L = 2048, 64 MiB at 4096), so the steps kept are bounded by
// their bytes as well as by their count; the oldest go first, and the last step is always kept.
#pragma once

#include <string>
#include <vector>

#include "scenario.hpp"

namespace mha::studio {

class History {
 public:
  explicit History(std::size_t limit = 200, std::size_t byte_limit = std::size_t(256) << 20)
      : limit_(limit), byte_limit_(byte_limit) {}
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
  std::size_t undo_steps() const { return undo_.size(); }
  // The bytes a snapshot of `s` holds (its mask, key padding and edited tensors; the rest is small).
  static std::size_t bytes(const Scenario& s);

 private:
  struct Entry {
    Scenario scenario;
    std::string what;
  };
  // Drops the oldest undo steps past the count or the bytes (undo and redo together), keeping the
  // newest undo step.
  void trim();
  std::size_t limit_, byte_limit_;
  std::vector<Entry> undo_, redo_;
};

}  // namespace mha::studio
