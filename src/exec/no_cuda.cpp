// Builds without CUDA: no GPU is ever usable, and the GPU kernels say so.
#include "exec/backends.hpp"
#include "exec/kernels.hpp"
#include "recsearch/error.hpp"

namespace recsearch::exec::detail {

bool gpu_usable(std::string* why) {
  if (why != nullptr) *why = "this build has no CUDA";
  return false;
}

void gemm_gpu(const GemmBatch&, const float*, std::size_t, const float*, std::size_t, float*,
              std::size_t) {
  throw Error(Errc::kRuntime, "this build has no CUDA");
}

bool unary_gpu(ir::OpKind, const float*, float*, std::size_t) { return false; }

}  // namespace recsearch::exec::detail
