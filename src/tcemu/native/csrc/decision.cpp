// The small-shape decision (decision.h), line for line as tcemu.emulation.gemm.decision computes it.
#include "decision.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <vector>

namespace tcemu::decision {

namespace {

std::string env_text(const char* name) {
  const char* raw = std::getenv(name);
  std::string v(raw ? raw : "");
  for (auto& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  v.erase(0, v.find_first_not_of(" \t\n"));
  v.erase(v.find_last_not_of(" \t\n") + 1);
  return v;
}

// configuration.env_flag: 1 true yes on / 0 false no off, anything else the default
bool env_flag(const char* name, bool fallback) {
  const auto v = env_text(name);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return fallback;
}

double env_number(const char* name, double fallback) {
  const auto v = env_text(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  return end != v.c_str() && x >= 0 ? x : fallback;
}

struct Settings {
  bool measured = env_text("TCEMU_SMALL_SHAPE_RULE") != "flops";
  double margin = env_number("TCEMU_SMALL_SHAPE_MARGIN", 0.05);
  double min_flops = env_number("TCEMU_SMALL_SHAPE_MIN_FLOPS", 6e9);
};

const Settings& settings() {
  static const Settings s;
  return s;
}

// decision.flop_threshold
int64_t flop_threshold(int64_t N, int64_t K, double min_flops) {
  if (min_flops <= 0) return 0;
  const double per_row = 2.0 * N * K;
  if (per_row <= 0) return kNever;
  auto m = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(min_flops / per_row)));
  while (m > 0 && 2.0 * (m - 1) * N * K >= min_flops) --m;
  while (2.0 * m * N * K < min_flops) ++m;
  return std::min(m, kNever);
}

// Curve.row_threshold
int64_t curve_threshold(const Curve& c, double margin) {
  const double need = std::log1p(margin);
  std::vector<double> s;
  for (int i = 0; i < c.count; ++i) {
    const Point& p = kPoints[c.first + i];
    const double speedup = p.emu_p80 > 0 ? p.sgemm_p20 / p.emu_p80 : 0.0;
    s.push_back(std::log(std::max(speedup, 1e-300)) - need);
  }
  int j = -1;
  for (int i = 0; i < c.count; ++i) {
    if (s[i] < 0) j = i;
  }
  if (j < 0) return kPoints[c.first].M;
  if (j == c.count - 1) return kNever;
  const Point& lo = kPoints[c.first + j];
  const Point& hi = kPoints[c.first + j + 1];
  const double frac = -s[j] / (s[j + 1] - s[j]);
  const double lo_m = static_cast<double>(lo.M), hi_m = static_cast<double>(hi.M);
  const double m = std::exp(std::log(lo_m) + frac * (std::log(hi_m) - std::log(lo_m)));
  return std::min<int64_t>(std::max<int64_t>(static_cast<int64_t>(std::ceil(m)), lo.M + 1), hi.M);
}

// DecisionTable.nearest
std::vector<const Curve*> nearest(const std::string& device, const std::string& method, const std::string& role,
                                  int64_t N, int64_t K) {
  std::vector<const Curve*> same;
  for (int i = 0; i < kCurveCount; ++i) {
    const Curve& c = kCurves[i];
    if (device == c.device && method == c.method && role == c.role) same.push_back(&c);
  }
  for (const Curve* c : same) {
    if (c->N == N && c->K == K) return {c};
  }
  if (N <= 0 || K <= 0) return {};
  const double limit = std::log(2.0) + 1e-12;
  std::vector<std::pair<double, const Curve*>> near;
  for (const Curve* c : same) {
    const double dn = std::abs(std::log(static_cast<double>(c->N) / static_cast<double>(N)));
    const double dk = std::abs(std::log(static_cast<double>(c->K) / static_cast<double>(K)));
    if (dn <= limit && dk <= limit) near.emplace_back(dn + dk, c);
  }
  if (near.empty()) return {};
  double d = near[0].first;
  for (const auto& [dist, c] : near) d = std::min(d, dist);
  std::vector<const Curve*> out;
  for (const auto& [dist, c] : near) {
    if (dist <= d + 1e-12) out.push_back(c);
  }
  return out;
}

}  // namespace

std::string describe() {
  std::vector<std::string> devices;
  for (int i = 0; i < kCurveCount; ++i) {
    const std::string d = kCurves[i].device;
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  std::string out = "small-shape tables (measured):";
  for (const auto& d : devices) out += " " + d + ";";
  return devices.empty() ? "small-shape tables (measured): none; the FLOP rule" : out + " elsewhere the FLOP rule";
}

bool fallback_enabled() {
  static const bool on = env_flag("TCEMU_SMALL_SHAPE_FALLBACK", true);
  return on;
}

int64_t row_threshold(const std::string& device, const std::string& method, const std::string& role, int64_t N,
                      int64_t K) {
  const Settings& s = settings();
  if (s.measured) {  // DecisionTable.threshold of the GPU's table, where a curve is at or near (N, K)
    int64_t out = -1;
    for (const Curve* c : nearest(device, method, role, N, K)) {
      int64_t t = curve_threshold(*c, s.margin);
      if ((c->N != N || c->K != K) && t < kNever) {
        const double scaled = static_cast<double>(t * c->N * c->K) / static_cast<double>(N * K);
        t = std::min(kNever, std::max(t, static_cast<int64_t>(std::ceil(scaled))));
      }
      out = std::max(out, t);
    }
    if (out >= 0) return out;
  }
  return flop_threshold(N, K, s.min_flops);
}

}  // namespace tcemu::decision
