// No ahead-of-time kernels and no measured small-shape table: what a build without tcemu's generated sources links
// (CMake run by hand); the products on CUDA then run the reference.
#include "aot.h"
#include "decision.h"

namespace tcemu::aot {

const KernelImage kKernels[] = {{}};
const int kKernelCount = 0;
const char* const kStatus = "built without python -m tcemu.native build, which compiles them";
const char* const kTritonVersion = "";
const unsigned char* blob() { return nullptr; }

}  // namespace tcemu::aot

namespace tcemu::decision {

const Point kPoints[] = {{}};
const Curve kCurves[] = {{}};
const int kCurveCount = 0;

}  // namespace tcemu::decision
