// Snapshots of a scenario, and undo/redo as a stack of them. A snapshot can never get out of step
// with the state it restores. At large sizes a scenario holds the whole mask (L·S floats: 16 MiB at
// L = 2048, 64 MiB at 4096) and edited tensors (8 MiB of query at L = 4096, E = 512):
// - a mask whose cells are all 0 or -inf (every preset but random values, every painted mask) is
//   kept as one bit a cell, 1/32 of its floats;
// - every undo step but the newest keeps only the tensor rows and mask bits in which it differs
//   from the state after it (a value drag's step: one token's row);
// - the steps kept are bounded by their bytes as well as by their count; the oldest go first, and
//   the last step is always kept.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "scenario.hpp"

namespace mha::studio {

// A scenario as the app keeps it beside the one being edited: the state the worker computes, the
// state a refused edit returns to, each undo step. Its mask cells are bits where they can be.
struct Snapshot {
  Scenario scenario;                   // mask.cells empty when `blocked` holds them
  std::vector<std::uint64_t> blocked;  // bit i: cell i is -inf (else 0); with cells > 0
  std::size_t cells = 0;               // the mask's cell count when kept as bits, else 0
  // The view on screen reads every attention weight (ViewReads::every_weight): the worker keeps them.
  // Not part of the scenario: what the window shows when the snapshot is computed.
  bool reads_every_weight = false;

  // `s` packed, its cells straight into bits (no float copy of them is made); s is left as it was.
  static Snapshot of(Scenario& s);
  std::size_t mask_cells() const { return cells ? cells : scenario.mask.cells.size(); }
  // The scenario into `current`, its cells unpacked into current's cell storage.
  void restore(Scenario& current) const;
  // The scenario with its cells as floats.
  Scenario unpacked() const;
  // The bytes its mask (bits or floats), key padding and edited tensors hold; the rest is small.
  std::size_t bytes() const;
};

class History {
 public:
  explicit History(std::size_t limit = 200, std::size_t byte_limit = std::size_t(256) << 20)
      : limit_(limit), byte_limit_(byte_limit) {}
  // Records `before` as the state to return to on undo; clears redo. The step is kept whole while it
  // is the newest (the edits of one gesture still change the state after it); the step below it is
  // then kept as its differences from `before`, the state after it.
  void push(std::shared_ptr<Snapshot> before, const std::string& what);
  bool can_undo() const { return !undo_.empty(); }
  bool can_redo() const { return !redo_.empty(); }
  // Swap `current` with the previous/next state; returns the edit's name ("" if none). `current`
  // is the state the last edit, undo or redo left (AppState changes the tensors and the mask only
  // through edits, which push a step).
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
  // The bytes the undo and redo steps hold now (masks kept as bits counted as such, steps kept as
  // differences counted as their rows).
  std::size_t bytes() const;

 private:
  // The rows of one tensor (or of the mask's bits) in which a step differs from the state after it.
  struct Patch {
    std::string name;                  // "query", "key", "value", "weights.<state_dict name>", "mask"
    std::size_t row_bytes = 0;         // a tensor's last dimension; 64 bytes of bits (512 cells)
    std::vector<std::uint32_t> rows;   // the rows that differ, ascending
    std::vector<unsigned char> bytes;  // their contents in the step's state
  };
  struct Entry {
    // The whole state; or, with `relative`, the state without the tensors and bits that `patches`
    // name (each group's patches hold every one of its tensors, unchanged rows left out).
    std::shared_ptr<Snapshot> state;
    bool relative = false;
    std::vector<Patch> patches;
    std::string what;
  };
  // Keeps `e` (whole) as its differences from `after`, for the tensors and bits of the same shapes.
  static void make_relative(Entry& e, const Snapshot& after);
  // The state `e` holds, given the state after it; nullopt when `after` lacks what `e` was made
  // against (never, while the caller keeps to undo's rule).
  static std::optional<Snapshot> state_of(const Entry& e, const Snapshot& after);
  // Undo and redo: the newest step of `from` into `current`, current's state onto `to`.
  std::string step(std::vector<Entry>& from, std::vector<Entry>& to, Scenario& current);
  static std::size_t bytes(const Entry& e);
  // Drops the oldest undo steps past the count or the bytes (undo and redo together), keeping the
  // newest undo step.
  void trim();
  std::size_t limit_, byte_limit_;
  std::vector<Entry> undo_, redo_;
};

}  // namespace mha::studio
