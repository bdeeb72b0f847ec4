// No ahead-of-time kernels: what a build without tcemu's generated aot_kernels.cpp links (CMake run by hand).
#include "aot.h"

namespace tcemu::aot {

const KernelImage kKernels[] = {{}};
const int kKernelCount = 0;
const char* const kStatus = "built without python -m tcemu.native build, which compiles them";
const char* const kTritonVersion = "";
const unsigned char* blob() { return nullptr; }

}  // namespace tcemu::aot
