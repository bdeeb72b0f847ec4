// Whether a product runs as IEEE SGEMM (the small-shape fallback), as tcemu's Python Triton backend decides it
// (tcemu.emulation.gemm.decision and triton_backend._use_fallback): the measured table of the GPU where tcemu ships
// one (generated: decision_tables.cpp), else the FLOP rule.
#pragma once

#include <cstdint>
#include <string>

namespace tcemu::decision {

// one measured row count: SGEMM's 20th-percentile and the emulation's 80th-percentile milliseconds
struct Point {
  int64_t M;
  double sgemm_p20, emu_p80;
};

// the points of one (GPU, method, role, N, K), kPoints[first .. first + count), by increasing M
struct Curve {
  const char* device;
  const char* method;
  const char* role;  // "fwd" (a @ W^T) or "bwd_input" (a @ B)
  int64_t N, K;
  int first, count;
};

extern const Point kPoints[];
extern const Curve kCurves[];
extern const int kCurveCount;

constexpr int64_t kNever = int64_t(1) << 62;

// the smallest row count from which an M x K x N product of `role` runs emulated on a GPU named `device`
// (decision.row_threshold with the shipped tables, the margin and FLOP count of TCEMU_SMALL_SHAPE_MARGIN and
// TCEMU_SMALL_SHAPE_MIN_FLOPS, or the FLOP rule alone with TCEMU_SMALL_SHAPE_RULE=flops)
int64_t row_threshold(const std::string& device, const std::string& method, const std::string& role, int64_t N,
                      int64_t K);
// TCEMU_SMALL_SHAPE_FALLBACK (default on)
bool fallback_enabled();
// what native_info reports: the GPUs with a measured table
std::string describe();

}  // namespace tcemu::decision
