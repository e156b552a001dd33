/*
 * A stand-in for libcuda.so.1 on machines without a GPU (CI).
 *
 * cuDNN's deviceless ("ahead-of-time") path -- device-properties descriptor, operation graphs,
 * heuristics, execution-plan finalize and plan JSON -- needs a loadable libcuda.so.1 that
 * initialises, reports one device and can "load" the cubins that plan finalize produces. Nothing
 * here touches a GPU: every call that would need one returns an error, so anything that tries to
 * execute fails cleanly instead of crashing.
 *
 * Build: gcc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o libcuda.so.1 libcuda_stub.c
 * (.ci/setup-cudnn.sh does this.)
 *
 * Signatures are reduced to what the stand-in reads or writes; the C calling convention makes the
 * unread trailing arguments harmless.
 */

#include <stddef.h>
#include <stdlib.h>

typedef int CUresult;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};

/* Distinct, never-dereferenced addresses for the dummy library and kernel handles. */
static char dummy_library;
static char dummy_kernel;

static const char stub_message[] = "libcuda stand-in (cudnn-graph CI): no GPU on this machine";

/* Marks this library as the stand-in, so tools can tell it from a real driver. */
int cudnn_graph_libcuda_stub = 1;

/* ---- calls that succeed: what cuDNN's deviceless planning needs ---------------------------- */

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return CUDA_SUCCESS;
}

/* CUDA 13.0, or the version CUDNN_GRAPH_STUB_DRIVER_VERSION gives (12040 is CUDA 12.4): the tests
 * of a driver too old for the loaded cuDNN (cudnn-runtime/tests/suite/driver_version.rs) run
 * with the stand-in posing as a CUDA 12 driver. */
CUresult cuDriverGetVersion(int *version) {
    const char *forced = getenv("CUDNN_GRAPH_STUB_DRIVER_VERSION");
    if (version == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    *version = forced != NULL ? atoi(forced) : 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (count == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    *count = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(int *device, int ordinal) {
    if (device == NULL || ordinal != 0) return CUDA_ERROR_NO_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **str) {
    (void)error;
    if (str == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    *str = stub_message;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **str) {
    (void)error;
    if (str == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    *str = "CUDA_ERROR_STUB";
    return CUDA_SUCCESS;
}

/* Plan finalize "loads" the cubin it compiled; without this succeeding it fails with 5001. */
CUresult cuLibraryLoadData(void **library, const void *code) {
    (void)code;
    if (library == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    *library = &dummy_library;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(void **kernel, void *library, const char *name) {
    (void)library;
    (void)name;
    if (kernel == NULL) return CUDA_ERROR_NOT_INITIALIZED;
    *kernel = &dummy_kernel;
    return CUDA_SUCCESS;
}

CUresult cuLibraryUnload(void *library) {
    (void)library;
    return CUDA_SUCCESS;
}

/* ---- calls that need a GPU: present (cuDNN resolves them) but failing ---------------------- */

#define FAILING(name)                                                                             \
    CUresult name(void) { return CUDA_ERROR_NO_DEVICE; }

FAILING(cuModuleGetFunction)
FAILING(cuModuleLoadData)
FAILING(cuModuleUnload)
FAILING(cuTensorMapEncodeIm2col)
FAILING(cuTensorMapEncodeTiled)
FAILING(cuCtxGetCurrent)
FAILING(cuCtxGetLimit)
FAILING(cuCtxPopCurrent)
FAILING(cuCtxPushCurrent)
FAILING(cuStreamGetCtx)
FAILING(cuLinkCreate)
FAILING(cuLinkAddData)
FAILING(cuLinkComplete)
FAILING(cuLinkDestroy)
FAILING(cuLaunchKernel)
FAILING(cuLaunchKernelEx)
FAILING(cuLaunchCooperativeKernel)
FAILING(cuLibraryLoadFromFile)
FAILING(cuKernelSetAttribute)
FAILING(cuKernelGetAttribute)
FAILING(cuKernelGetFunction)
FAILING(cuOccupancyMaxPotentialClusterSize)
/* cudarc's CudaContext::new retains the primary context: failing here makes GPU detection in the
 * tests report "no device" instead of tripping over a missing symbol. */
FAILING(cuDevicePrimaryCtxRetain)

/* Symbol lookups: clear the out-pointer so a caller that ignores the status still sees NULL. */
CUresult cuGetProcAddress(const char *symbol, void **pfn) {
    (void)symbol;
    if (pfn != NULL) *pfn = NULL;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn) {
    (void)symbol;
    if (pfn != NULL) *pfn = NULL;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetExportTable(const void **table, const void *id) {
    (void)id;
    if (table != NULL) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
