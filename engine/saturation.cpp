#include "saturation.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "errors.hpp"

namespace mha {

namespace {

// Standard normals from a 32-bit Mersenne Twister by Box–Muller: mt19937's outputs are fixed by the
// standard, std::normal_distribution's are not (libstdc++ and libc++ differ).
class Normals {
 public:
  explicit Normals(std::uint32_t seed) : engine_(seed) {}
  double next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1]: ln(0) never happens.
    const double u1 = (double(engine_()) + 1.0) / 4294967296.0;
    const double u2 = double(engine_()) / 4294967296.0;
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
    spare_ = r * std::sin(t);
    have_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::mt19937 engine_;
  double spare_ = 0;
  bool have_spare_ = false;
};

// softmax(scores · factor) of one row: its largest weight and its entropy in nats.
void row_stats(const std::vector<double>& scores, double factor, double& max_weight, double& entropy) {
  double top = -INFINITY;
  for (double s : scores) top = std::max(top, s * factor);
  double sum = 0;
  for (double s : scores) sum += std::exp(s * factor - top);
  max_weight = 1.0 / sum;  // the top score's weight: exp(0) / sum
  entropy = 0;
  for (double s : scores) {
    const double w = std::exp(s * factor - top) / sum;
    if (w > 0) entropy -= w * std::log(w);
  }
}

}  // namespace

double SaturationCurves::uniform_entropy() const {
  return std::log(double(std::max(1, keys)));
}

SaturationCurves softmax_saturation(const std::vector<int>& d_ks, int keys, int rows, std::uint64_t seed) {
  if (keys < 1)
    throw ConfigError("keys", "keys = " + std::to_string(keys) + ": a row needs at least one key");
  if (rows < 1) throw ConfigError("rows", "rows = " + std::to_string(rows) + ": at least one row to average");
  double work = 0;
  for (int d : d_ks) {
    if (d < 1) throw ConfigError("d_k", "d_k = " + std::to_string(d) + ": expected at least 1");
    work += double(rows) * double(keys + 1) * double(d);
  }
  if (work > kMaxSaturationWork)
    throw ConfigError("rows", "the saturation curves for these sizes take " +
                                  std::to_string((long long)work) + " multiply-adds, more than " +
                                  std::to_string((long long)kMaxSaturationWork));
  SaturationCurves c;
  c.keys = keys;
  c.rows = rows;
  c.seed = seed;
  for (int d : d_ks) {
    // Each d_k its own stream: a point does not depend on which other d_k are asked for.
    Normals rng(std::uint32_t((seed * 0x9E3779B97F4A7C15ull + std::uint64_t(d)) >> 32));
    std::vector<double> q(std::size_t(d), 0.0), scores(std::size_t(keys), 0.0);
    SaturationPoint p;
    p.d_k = d;
    for (int r = 0; r < rows; ++r) {
      for (double& x : q) x = rng.next();
      for (double& s : scores) {  // s = q·k_j, k_j drawn afresh for every row
        s = 0;
        for (int e = 0; e < d; ++e) s += q[std::size_t(e)] * rng.next();
      }
      double m, h;
      row_stats(scores, 1.0 / std::sqrt(double(d)), m, h);
      p.max_weight_scaled += m;
      p.entropy_scaled += h;
      row_stats(scores, 1.0, m, h);
      p.max_weight_unscaled += m;
      p.entropy_unscaled += h;
    }
    p.max_weight_scaled /= rows;
    p.entropy_scaled /= rows;
    p.max_weight_unscaled /= rows;
    p.entropy_unscaled /= rows;
    c.points.push_back(p);
  }
  return c;
}

std::vector<int> powers_of_two(int max_d_k) {
  std::vector<int> out;
  for (long long d = 1; d <= max_d_k; d *= 2) out.push_back(int(d));
  return out;
}

}  // namespace mha
