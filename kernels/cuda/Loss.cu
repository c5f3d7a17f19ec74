//===- Loss.cu - (being written) ---------------------------------------===//
#include "kernels/cuda/Launch.h"

using namespace headroom;
using namespace headroom::cuda;

void cuda::registerLossKernels() {}
