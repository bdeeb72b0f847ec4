// The emulation methods (tcemu.emulation.methods.METHODS): the fields the products read.
#include "tcemu_native.h"

#include <cmath>
#include <map>

namespace tcemu {

namespace {

const std::map<std::string, MethodSpec>& methods() {
  static const std::map<std::string, MethodSpec> table = {
      {"fp32", {"fp32", "fp32", 1, {{0, 0}}, 0}},
      {"tf32", {"tf32", "tf32", 1, {{0, 0}}, 11}},
      {"tf32x3", {"tf32x3", "tf32", 2, {{1, 0}, {0, 1}, {0, 0}}, 11}},
      {"bf16x3", {"bf16x3", "bf16", 2, {{1, 0}, {0, 1}, {0, 0}}, 8}},
      {"bf16x6", {"bf16x6", "bf16", 3, {{1, 1}, {2, 0}, {0, 2}, {1, 0}, {0, 1}, {0, 0}}, 8}},
      {"bf16x9", {"bf16x9", "bf16", 3, {{2, 2}, {2, 1}, {1, 2}, {1, 1}, {2, 0}, {0, 2}, {1, 0}, {0, 1}, {0, 0}}, 8}},
  };
  return table;
}

// MethodSpec._range_threshold: the largest T with n k 2^(2T+2) (1 + u)^(n k + levels + 2) <= FLT_MAX, at least 1
int range_threshold_of(int n, int levels, int64_t k) {
  const double u = std::ldexp(1.0, -24);
  const double steps = static_cast<double>(n * k + levels + 2);
  const double log2_max = 127 + std::log2(2 - std::ldexp(1.0, -23));
  const double room = log2_max - std::log2(static_cast<double>(n)) - std::log2(static_cast<double>(k)) -
                      steps * std::log2(1 + u) - 2;
  return std::max(1, static_cast<int>(std::floor(room / 2 - 1e-9)));
}

}  // namespace

std::vector<std::vector<std::pair<int, int>>> MethodSpec::levels() const {
  int top = 0;
  for (const auto& p : products) top = std::max(top, p.first + p.second);
  std::vector<std::vector<std::pair<int, int>>> out(top + 1);
  for (const auto& p : products) out[p.first + p.second].push_back(p);
  return out;
}

int MethodSpec::max_level_products() const {
  size_t most = 0;
  for (const auto& level : levels()) most = std::max(most, level.size());
  return static_cast<int>(most);
}

int MethodSpec::range_threshold(int64_t k) const {
  // T(k) does not grow with k, so this equals the Python spec's table of steps read at k
  return range_threshold_of(max_level_products(), static_cast<int>(levels().size()), std::max<int64_t>(k, 1));
}

const MethodSpec& get_method(const std::string& name) {
  std::string key = name;
  for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto& table = methods();
  auto found = table.find(key);
  TORCH_CHECK_VALUE(found != table.end(), "tcemu (native): unknown method '", name,
                    "'; choose one of fp32, tf32, tf32x3, bf16x3, bf16x6, bf16x9");
  return found->second;
}

}  // namespace tcemu
