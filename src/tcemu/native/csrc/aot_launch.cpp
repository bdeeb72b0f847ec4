// Launching the ahead-of-time kernels (aot.h) through the CUDA driver API, opened at run time with dlopen: the
// library builds against a CPU-only torch with no CUDA headers, and on a CUDA torch uses the driver torch loaded.
#include "aot.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>

#include <climits>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

namespace tcemu::aot {

namespace {

// the driver API's types and the few values used (cuda.h)
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
constexpr int kAttrCcMajor = 75, kAttrCcMinor = 76, kAttrSharedOptin = 97;  // CU_DEVICE_ATTRIBUTE_*
constexpr int kFuncSharedStatic = 1, kFuncMaxDynamicShared = 8;               // CU_FUNC_ATTRIBUTE_*
constexpr int kCachePreferShared = 1;                                         // CU_FUNC_CACHE_PREFER_SHARED

struct Driver {
  std::string error;  // "" when every entry point was found
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuFuncSetCacheConfig)(CUfunction, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
};

template <typename F>
void bind(void* lib, const char* name, F* fn, std::string* error) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr && error->empty()) *error = std::string("libcuda.so.1 has no ") + name;
}

const Driver& driver() {
  static const Driver loaded = [] {
    Driver d{};
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      d.error = std::string("the CUDA driver (libcuda.so.1) could not be opened: ") + (e ? e : "?");
      return d;
    }
    bind(lib, "cuInit", &d.cuInit, &d.error);
    bind(lib, "cuDeviceGet", &d.cuDeviceGet, &d.error);
    bind(lib, "cuDeviceGetAttribute", &d.cuDeviceGetAttribute, &d.error);
    bind(lib, "cuDeviceGetName", &d.cuDeviceGetName, &d.error);
    bind(lib, "cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain, &d.error);
    bind(lib, "cuCtxGetCurrent", &d.cuCtxGetCurrent, &d.error);
    bind(lib, "cuCtxSetCurrent", &d.cuCtxSetCurrent, &d.error);
    bind(lib, "cuModuleLoadData", &d.cuModuleLoadData, &d.error);
    bind(lib, "cuModuleGetFunction", &d.cuModuleGetFunction, &d.error);
    bind(lib, "cuFuncGetAttribute", &d.cuFuncGetAttribute, &d.error);
    bind(lib, "cuFuncSetAttribute", &d.cuFuncSetAttribute, &d.error);
    bind(lib, "cuFuncSetCacheConfig", &d.cuFuncSetCacheConfig, &d.error);
    bind(lib, "cuLaunchKernel", &d.cuLaunchKernel, &d.error);
    bind(lib, "cuGetErrorString", &d.cuGetErrorString, &d.error);
    if (d.error.empty() && d.cuInit(0) != 0) d.error = "cuInit failed";
    return d;
  }();
  return loaded;
}

void check(CUresult r, const char* what) {
  if (r == 0) return;
  const char* text = nullptr;
  driver().cuGetErrorString(r, &text);
  TORCH_CHECK(false, "tcemu (native): the CUDA driver's ", what, " failed (", r, ": ", text ? text : "?", ")");
}

struct DeviceInfo {
  std::string why;  // "" when the kernels can run
  std::string name;  // the GPU's name (torch.cuda.get_device_name)
  int arch = 0, shared_optin = 0;
  CUcontext context = nullptr;
};

std::mutex mutex;

const DeviceInfo& device_info(int index) {
  static std::map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(index);
  if (found != cache.end()) return found->second;
  DeviceInfo info;
  const Driver& d = driver();
  if (kKernelCount == 0) {
    info.why = std::string("the library holds no CUDA kernels: ") + kStatus;
  } else if (!d.error.empty()) {
    info.why = d.error;
  } else {
    CUdevice dev;
    int major = 0, minor = 0;
    char name[256] = {0};
    if (d.cuDeviceGet(&dev, index) != 0 || d.cuDeviceGetName(name, sizeof(name) - 1, dev) != 0 ||
        d.cuDeviceGetAttribute(&major, kAttrCcMajor, dev) != 0 ||
        d.cuDeviceGetAttribute(&minor, kAttrCcMinor, dev) != 0 ||
        d.cuDeviceGetAttribute(&info.shared_optin, kAttrSharedOptin, dev) != 0 ||
        d.cuDevicePrimaryCtxRetain(&info.context, dev) != 0) {
      info.why = "the CUDA driver could not describe device " + std::to_string(index);
    } else {
      info.name = name;
      if (major == 9 && minor == 0) {
        info.arch = 90;  // sm_90a cubins run on sm_90 only
      } else if (major == 8) {
        info.arch = 80;  // sm_80 cubins run on every sm_8x
      } else {
        info.why = "no cubin for sm_" + std::to_string(major * 10 + minor) + " (the library has sm_80 and sm_90a)";
      }
    }
  }
  return cache.emplace(index, info).first->second;
}

std::set<std::string>& fallbacks() {
  static std::set<std::string> notes;
  return notes;
}

// the function of image `i` in the device's primary context, loaded once
CUfunction function(int i, int device_index, const DeviceInfo& info) {
  static std::map<std::pair<int, int>, CUfunction> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = loaded.find({i, device_index});
  if (found != loaded.end()) return found->second;
  const Driver& d = driver();
  const KernelImage& k = kKernels[i];
  CUmodule module;
  CUfunction f;
  check(d.cuModuleLoadData(&module, blob() + k.offset), "cuModuleLoadData");
  check(d.cuModuleGetFunction(&f, module, k.name), "cuModuleGetFunction");
  if (k.shared > 48 * 1024) {  // dynamic shared memory beyond 48 KiB is opted into (as Triton's loader does)
    int static_shared = 0;
    check(d.cuFuncGetAttribute(&static_shared, kFuncSharedStatic, f), "cuFuncGetAttribute");
    const int allowed = info.shared_optin - static_shared;
    TORCH_CHECK(k.shared <= allowed, "tcemu (native): ", k.key, " needs ", k.shared, " bytes of dynamic shared memory, "
                "device ", device_index, " allows ", allowed);
    check(d.cuFuncSetCacheConfig(f, kCachePreferShared), "cuFuncSetCacheConfig");
    check(d.cuFuncSetAttribute(f, kFuncMaxDynamicShared, info.shared_optin - static_shared), "cuFuncSetAttribute");
  }
  loaded[{i, device_index}] = f;
  return f;
}

// the context current on this thread made the device's primary context (torch's), restored on scope exit
struct ContextGuard {
  CUcontext previous = nullptr;
  bool switched = false;
  explicit ContextGuard(CUcontext context) {
    check(driver().cuCtxGetCurrent(&previous), "cuCtxGetCurrent");
    if (previous != context) {
      check(driver().cuCtxSetCurrent(context), "cuCtxSetCurrent");
      switched = previous != nullptr;
    }
  }
  ~ContextGuard() {
    if (switched) driver().cuCtxSetCurrent(previous);
  }
};

}  // namespace

std::string unavailable(int device_index) { return device_info(device_index).why; }

std::string device_name(int device_index) { return device_info(device_index).name; }

const KernelImage* find(int device_index, const std::string& method, const std::string& kind,
                        const std::string& variant, std::string* why) {
  const DeviceInfo& info = device_info(device_index);
  if (!info.why.empty()) {
    *why = info.why;
    return nullptr;
  }
  for (int i = 0; i < kKernelCount; ++i) {
    const KernelImage& k = kKernels[i];
    if (k.arch == info.arch && method == k.method && kind == k.kind && variant == k.variant) {
      if (k.shared > info.shared_optin) {
        *why = std::string(k.key) + " needs " + std::to_string(k.shared) + " bytes of shared memory, device " +
               std::to_string(device_index) + " has " + std::to_string(info.shared_optin);
        return nullptr;
      }
      if (k.num_ctas != 1 || k.cooperative || k.pdl) {
        *why = std::string(k.key) + " needs a launch this library does not make (clusters, cooperative, PDL)";
        return nullptr;
      }
      return &k;
    }
  }
  *why = "no kernel " + method + "/" + kind + "/" + variant + " for sm_" + std::to_string(info.arch);
  return nullptr;
}

void launch(const KernelImage& k, int device_index, int64_t gx, int64_t gy, int64_t gz, const std::vector<Arg>& args) {
  const std::string codes(k.args);
  TORCH_CHECK(args.size() == codes.size(), "tcemu (native): ", k.key, " takes ", codes.size(), " arguments, got ",
              args.size());
  TORCH_CHECK(gx > 0 && gx < (1LL << 31) && gy > 0 && gy <= 65535 && gz > 0 && gz <= 65535,
              "tcemu (native): grid (", gx, ", ", gy, ", ", gz, ") out of CUDA's range");
  const DeviceInfo& info = device_info(device_index);
  const int index = static_cast<int>(&k - kKernels);
  c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index));
  c10::DeviceGuard device_guard(device);
  ContextGuard context(info.context);
  CUfunction f = function(index, device_index, info);
  // the parameter values: int32 arguments as 4 bytes, pointers and int64 as 8, then Triton's scratch pointers
  std::vector<uint64_t> storage(codes.size() + 2, 0);
  std::vector<void*> params;
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] == 'i') {
      const auto v = static_cast<int64_t>(args[i].value);
      TORCH_CHECK(v >= INT32_MIN && v <= INT32_MAX, "tcemu (native): ", k.key, " argument ", i, " exceeds int32");
      const auto narrow = static_cast<int32_t>(v);
      std::memcpy(&storage[i], &narrow, sizeof(narrow));
    } else {
      storage[i] = args[i].value;
    }
    params.push_back(&storage[i]);
  }
  std::vector<at::Tensor> scratch;
  const std::string extra(k.extra);
  for (size_t j = 0; j < extra.size(); ++j) {
    const int size = extra[j] == 'g' ? k.global_scratch_size : k.profile_scratch_size;
    if (size > 0) {  // per program, as Triton's launcher allocates it
      scratch.push_back(at::empty({gx * gy * gz * k.num_ctas * size + 256},
                                  at::TensorOptions().dtype(at::kByte).device(device)));
      storage[codes.size() + j] = (reinterpret_cast<uint64_t>(scratch.back().data_ptr()) + 255) / 256 * 256;
    }
    params.push_back(&storage[codes.size() + j]);
  }
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  auto stream = static_cast<CUstream>(impl->getStream(device).native_handle());
  check(driver().cuLaunchKernel(f, static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz),
                                32 * k.num_warps, 1, 1, k.shared, stream, params.data(), nullptr),
        "cuLaunchKernel");
}

void note_fallback(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex);
  fallbacks().insert(why);
}

std::string describe() {
  std::ostringstream out;
  if (kKernelCount == 0) {
    out << "CUDA GEMM kernels: none (" << kStatus << "); on CUDA the products run the reference";
  } else {
    std::set<std::string> methods;
    for (int i = 0; i < kKernelCount; ++i) methods.insert(kKernels[i].method);
    out << "CUDA GEMM kernels (ahead of time): " << kStatus << "; methods";
    for (const auto& m : methods) out << " " << m;
  }
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& why : fallbacks()) out << "\nreference on CUDA: " << why;
  return out.str();
}

}  // namespace tcemu::aot
