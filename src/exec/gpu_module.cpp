// SPDX-License-Identifier: Apache-2.0
// The execution layer's side of the GPU module: locating and dlopen-ing
// librecsearch_gpu.so, checking its ABI version, and the GPU kernels of the
// executor (gpu_usable, gemm_gpu, unary_gpu) as calls through its C
// interface. Builds without CUDA have no module and say so.
#include "exec/gpu_module.hpp"

#include <dlfcn.h>  // dlopen: the GPU module is loaded only when a GPU is asked for

#include <array>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <vector>

#include "exec/backends.hpp"
#include "exec/kernels.hpp"
#include "recsearch/error.hpp"

namespace recsearch::exec::detail {
namespace {

struct Loaded {
  const RecsearchGpuApi* api = nullptr;
  std::string why;
};

#ifdef RECSEARCH_HAVE_CUDA
// Where the module may be, in the order tried.
std::vector<std::string> candidates() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("RECSEARCH_GPU_MODULE"); env != nullptr && *env != '\0') {
    return {env};
  }
  std::vector<std::string> out;
  const fs::path libdir = RECSEARCH_GPU_MODULE_LIBDIR;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && !libdir.is_absolute()) {
    out.push_back((exe.parent_path() / ".." / libdir / "recsearch" / RECSEARCH_GPU_MODULE_NAME)
                      .lexically_normal()
                      .string());
  }
  out.push_back(
      (fs::path(RECSEARCH_GPU_MODULE_PREFIX) / libdir / "recsearch" / RECSEARCH_GPU_MODULE_NAME)
          .lexically_normal()
          .string());
  out.push_back(RECSEARCH_GPU_MODULE_BUILD_PATH);
  return out;
}

Loaded load() {
  Loaded r;
  std::string tried;
  for (const std::string& path : candidates()) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      tried += "\n  " + (e != nullptr ? std::string(e) : path + ": cannot be loaded");
      continue;
    }
    // The handle is kept for the life of the process: the module's
    // function pointers are used until exit.
    auto fn = reinterpret_cast<RecsearchGpuApiFn>(dlsym(h, RECSEARCH_GPU_API_SYMBOL));
    if (fn == nullptr) {
      r.why = "the GPU module " + path + " does not export " RECSEARCH_GPU_API_SYMBOL;
      return r;
    }
    r.api = fn(kRecsearchGpuAbiVersion);
    if (r.api == nullptr || r.api->abi_version != kRecsearchGpuAbiVersion) {
      r.api = nullptr;
      r.why = "the GPU module " + path + " does not provide interface version " +
              std::to_string(kRecsearchGpuAbiVersion) + " (a module of another recsearch build?)";
    }
    return r;
  }
  r.why = "cannot load the GPU module (set RECSEARCH_GPU_MODULE to librecsearch_gpu.so):" + tried;
  return r;
}
#endif

// Throws Error(kRuntime) with the module's message when rc is non-zero.
void check(int rc, const std::array<char, 1024>& err) {
  if (rc != 0) throw Error(Errc::kRuntime, err.data());
}

}  // namespace

const RecsearchGpuApi* gpu_api(std::string* why) {
#ifdef RECSEARCH_HAVE_CUDA
  static const Loaded loaded = load();
  if (loaded.api == nullptr && why != nullptr) *why = loaded.why;
  return loaded.api;
#else
  if (why != nullptr) *why = "this build has no CUDA";
  return nullptr;
#endif
}

bool gpu_usable(std::string* why) {
  const RecsearchGpuApi* api = gpu_api(why);
  if (api == nullptr) return false;
  int n = 0;
  std::array<char, 1024> err{};
  if (api->device_count(&n, err.data(), err.size()) != 0) {
    if (why != nullptr) *why = err.data();
    return false;
  }
  if (n == 0) {
    if (why != nullptr) *why = "no CUDA device";
    return false;
  }
  return true;
}

void gemm_gpu(const GemmBatch& g, const float* a, std::size_t a_n, const float* b, std::size_t b_n,
              float* c, std::size_t c_n) {
  std::string why;
  const RecsearchGpuApi* api = gpu_api(&why);
  if (api == nullptr) throw Error(Errc::kRuntime, "no usable GPU: " + why);
  const RecsearchGpuGemm d{g.m,
                           g.n,
                           g.k,
                           g.trans_a ? 1 : 0,
                           g.trans_b ? 1 : 0,
                           g.c_off.size(),
                           g.a_off.data(),
                           g.b_off.data(),
                           g.c_off.data()};
  std::array<char, 1024> err{};
  check(api->gemm(&d, a, a_n, b, b_n, c, c_n, err.data(), err.size()), err);
}

bool unary_gpu(ir::OpKind kind, const float* x, float* y, std::size_t n) {
  // Without a module the CPU kernel runs, as for kinds without a GPU kernel.
  const RecsearchGpuApi* api = gpu_api(nullptr);
  if (api == nullptr) return false;
  int done = 0;
  std::array<char, 1024> err{};
  check(api->unary(static_cast<int>(kind), static_cast<int>(ir::OpKind::ReLU), x, y, n, &done,
                   err.data(), err.size()),
        err);
  return done != 0;
}

}  // namespace recsearch::exec::detail
