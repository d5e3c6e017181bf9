/* A stand-in libcuda.so.1 that records the launches made through it. */
#include <stdint.h>
#include <string.h>
#include "cuda.h"

#define MAX_PARAMS 32
typedef struct {
    unsigned grid[3], block[3], shared, num_attrs;
    uint64_t stream, function, count;
    uint64_t params[MAX_PARAMS];
} Launch;

Launch last;
int param_count = 0;
static int fake_context = 1;

static void record(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, CUstream stream, CUfunction f, void **params, unsigned attrs) {
    memset(&last, 0, sizeof last);
    last.grid[0] = gx; last.grid[1] = gy; last.grid[2] = gz;
    last.block[0] = bx; last.block[1] = by; last.block[2] = bz;
    last.shared = shared; last.num_attrs = attrs;
    last.stream = (uint64_t)stream; last.function = (uint64_t)f;
    last.count += 1;
    for (int i = 0; i < param_count; i++) memcpy(&last.params[i], params[i], 8);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    record(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
           c->sharedMemBytes, c->hStream, f, params, c->numAttrs);
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, CUstream stream,
                        void **params, void **extra) {
    record(gx, gy, gz, bx, by, bz, shared, stream, f, params, 0);
    return CUDA_SUCCESS;
}
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
    *(CUdeviceptr *)data = p; return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)&fake_context; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int o) { *d = o; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = (CUcontext)&fake_context; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) { return CUDA_SUCCESS; }
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { return CUDA_SUCCESS; }
CUresult cuGetErrorString(CUresult r, const char **s) { *s = "fake"; return CUDA_SUCCESS; }

/* Loading a binary: a made-up module and function; the image's first bytes are kept */
unsigned char loaded_image[4];
CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    memcpy(loaded_image, image, sizeof loaded_image); *m = (CUmodule)1; return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    *f = (CUfunction)0xABC0; return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
    *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0; return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    *v = 232448; return CUDA_SUCCESS;  /* an H100's shared memory a block, opted in */
}
CUresult cuFuncSetCacheConfig(CUfunction f, CUfunc_cache c) { return CUDA_SUCCESS; }
