// Undo/redo as whole-scenario snapshots: scenarios are small (KBs at teaching sizes), and a
// snapshot can never get out of step with the state it restores. At large sizes a snapshot holds
// the whole mask (L·S floats: 16 MiB at L = 2048, 64 MiB at 4096). A mask whose cells are all 0 or
// -inf (every preset but random values, every painted mask) is kept as one bit a cell, 1/32 of
// its floats; the steps kept are bounded by their bytes as well as by their count; the oldest go
// first, and the last step is always kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scenario.hpp"

namespace mha::studio {

class History {
 public:
  // A scenario as a step keeps it: its mask cells as bits where they are all 0 or -inf.
  struct Entry {
    Scenario scenario;  // mask.cells empty when `blocked` holds them
    std::string what;
    std::vector<std::uint64_t> blocked;  // bit i: cell i is -inf (else 0); with cells > 0
    std::size_t cells = 0;               // the mask's cell count when kept as bits, else 0
  };
  // `s` as a step would keep it, its cells packed straight from s (no float copy of them is made);
  // s is left as it was.
  static Entry snapshot(Scenario& s);
  // The snapshot's scenario into `current`, its cells unpacked into current's cell storage.
  static void restore(const Entry& e, Scenario& current);

  explicit History(std::size_t limit = 200, std::size_t byte_limit = std::size_t(256) << 20)
      : limit_(limit), byte_limit_(byte_limit) {}
  // Records `before` (a snapshot) as the state to return to on undo; clears redo.
  void push(Entry before, const std::string& what);
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
  // The bytes a snapshot of `s` holds with its mask as floats (its mask, key padding and edited
  // tensors; the rest is small).
  static std::size_t bytes(const Scenario& s);
  // The bytes the undo and redo steps hold now (masks kept as bits counted as such).
  std::size_t bytes() const;

 private:
  // The step's scenario moved into `current`, its cells unpacked into current's old cell storage.
  static void restore(Entry&& e, Scenario& current);
  // Undo and redo: the newest step of `from` into `current`, current's state onto `to`.
  static std::string step(std::vector<Entry>& from, std::vector<Entry>& to, Scenario& current);
  static std::size_t bytes(const Entry& e);
  // Drops the oldest undo steps past the count or the bytes (undo and redo together), keeping the
  // newest undo step.
  void trim();
  std::size_t limit_, byte_limit_;
  std::vector<Entry> undo_, redo_;
};

}  // namespace mha::studio
