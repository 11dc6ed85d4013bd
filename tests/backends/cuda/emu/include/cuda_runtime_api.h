/* cuda_runtime_api.h (emulator): see cuda_runtime.h. Test-only. */
#include "cuda_runtime.h"
