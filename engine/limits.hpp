// The one table of limits for every number a user gives: the CLI's options, a scenario file's fields
// and mha-studio's arguments are checked against these where they enter, so the same value is
// accepted or refused everywhere, with the same words.
#pragma once

#include <cstdint>
#include <string>

namespace mha::limits {

struct Range {
  const char* what;  // what the number is, for messages: "embed_dim (E)"
  double min, max;
};

// Sizes of one forward (N, L, S, E, H, G, kdim, vdim). Zero is never a size: an option that is given
// must be at least 1, and a size left out takes the default the help text names.
inline constexpr Range kBatch{"batch (N)", 1, 1 << 20};
inline constexpr Range kTgtLen{"tgt_len (L)", 1, 1 << 20};
inline constexpr Range kSrcLen{"src_len (S)", 1, 1 << 20};
inline constexpr Range kEmbedDim{"embed_dim (E)", 1, 1 << 20};
inline constexpr Range kNumHeads{"num_heads (H)", 1, 1 << 20};
inline constexpr Range kNumKvHeads{"num_kv_heads (G)", 1, 1 << 20};
inline constexpr Range kKdim{"kdim", 1, 1 << 20};
inline constexpr Range kVdim{"vdim", 1, 1 << 20};

// The app's view: the presenter font scale (its slider's range), and window sizes GLFW can make.
inline constexpr Range kFontScale{"font_scale", 1, 3};
inline constexpr Range kWindowSize{"window size", 64, 16384};
// mha-studio --soak SECONDS and --edits N: a soak of at most a day.
inline constexpr Range kSoakSeconds{"soak seconds", 0, 86400};
inline constexpr Range kEdits{"edits", 0, 10'000'000};
// mha bench --sgemm n: three n x n float matrices of at most 3 GiB together.
inline constexpr Range kSgemmN{"sgemm n", 1, 16384};

inline bool contains(const Range& r, double v) {
  return v >= r.min && v <= r.max;
}

// "--src-len 0: src_len (S) must be from 1 to 1048576" (NaN included in the refusal).
inline std::string out_of_range(const std::string& where, const Range& r, const std::string& value) {
  const auto num = [](double x) {
    std::string s = std::to_string(x);
    if (s.find('.') != std::string::npos) {
      s.erase(s.find_last_not_of('0') + 1);
      if (s.back() == '.') s.pop_back();
    }
    return s;
  };
  return where + " " + value + ": " + r.what + " must be from " + num(r.min) + " to " + num(r.max);
}

}  // namespace mha::limits
