//===- CublasLt.cpp - cuBLASLt, loaded when a GPU first needs it ----------===//
#include "kernels/cuda/CublasLt.h"

#include <dlfcn.h>
#include <type_traits>

using namespace headroom;
using namespace headroom::cuda;

namespace {

struct Loaded {
  CublasLtApi Api{};
  bool Ok = false;
  std::string Error;
};

Loaded load() {
  Loaded l;
  std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void *lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef HEADROOM_CUDA_LIBRARY_DIR
  if (!lib)
    lib = dlopen((std::string(HEADROOM_CUDA_LIBRARY_DIR) + "/" + name).c_str(),
                 RTLD_NOW | RTLD_LOCAL);
#endif
  if (!lib) {
    const char *why = dlerror();
    l.Error = "cannot load " + name + ": " + (why ? why : "not found");
    return l;
  }
  // Every entry point, or an error naming the first one missing.
  auto bind = [&](auto &fn, const char *symbol) {
    if (!l.Error.empty())
      return;
    void *p = dlsym(lib, symbol);
    if (!p) {
      l.Error = name + " has no " + symbol;
      return;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  CublasLtApi &a = l.Api;
  bind(a.Create, "cublasLtCreate");
  bind(a.Destroy, "cublasLtDestroy");
  bind(a.Matmul, "cublasLtMatmul");
  bind(a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(a.MatmulDescCreate, "cublasLtMatmulDescCreate");
  bind(a.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  bind(a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  bind(a.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  bind(a.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  bind(a.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(a.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  bind(a.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  bind(a.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  l.Ok = l.Error.empty();
  return l;
}

} // namespace

const CublasLtApi *cuda::cublasLt(std::string *error) {
  static const Loaded loaded = load();
  if (!loaded.Ok && error)
    *error = loaded.Error;
  return loaded.Ok ? &loaded.Api : nullptr;
}
