// A CUDA driver, cuBLAS and cuRAND that run nothing and count every call: the `cuda` build
// of tune on a machine without a GPU, to see what the host does for each step of a pack (the
// CUDA API calls, by name, and the host's own time). Device memory is host memory, so copies
// move real bytes; kernels, GEMMs and random draws do nothing, so every value the GPU would
// compute is garbage, but for tune's own kernels, which NULL_CUDA_RUN_KERNELS=1 runs on the
// host (null-cuda-kernels.cpp). Built and used by scripts/null-cuda; read by
// benches/gpu_calls.rs through `null_cuda_calls`.
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define MAX_NAMES 256
static const char *names[MAX_NAMES];
static atomic_ulong counts[MAX_NAMES];
static atomic_int used;

// One slot per function name, found once per call site (each macro use has its own static).
static int slot(const char *name) {
    int n = atomic_load(&used);
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0) return i;
    static atomic_flag lock = ATOMIC_FLAG_INIT;
    while (atomic_flag_test_and_set(&lock)) {}
    n = atomic_load(&used);
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) { atomic_flag_clear(&lock); return i; }
    if (n == MAX_NAMES) { atomic_flag_clear(&lock); return MAX_NAMES - 1; }
    names[n] = name;
    atomic_store(&used, n + 1);
    atomic_flag_clear(&lock);
    return n;
}

#define COUNT()                                                   \
    do {                                                          \
        static int s = -1;                                        \
        if (s < 0) s = slot(__func__);                            \
        atomic_fetch_add_explicit(&counts[s], 1, memory_order_relaxed); \
    } while (0)

// Writes "name count\n" for every function called so far into `buf` (at most `len` bytes,
// NUL-terminated); returns the bytes it needed.
size_t null_cuda_calls(char *buf, size_t len) {
    size_t at = 0;
    int n = atomic_load(&used);
    for (int i = 0; i < n; i++) {
        int w = snprintf(buf ? buf + (at < len ? at : len) : NULL, at < len ? len - at : 0,
                         "%s %lu\n", names[i], atomic_load(&counts[i]));
        at += (size_t)w;
    }
    return at;
}

// A handle the caller only passes back.
static void *handle(void) { return malloc(16); }

#define SIMPLE(name, ...) CUresult name(__VA_ARGS__) { COUNT(); return 0; }

// Driver: the device.
SIMPLE(cuInit, unsigned flags)
CUresult cuDriverGetVersion(int *v) { COUNT(); *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { COUNT(); *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { COUNT(); *d = ordinal; return 0; }
CUresult cuDeviceGetName(char *name, int len, int dev) {
    COUNT(); snprintf(name, (size_t)len, "null-cuda"); return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { COUNT(); *bytes = 80ull << 30; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    COUNT();
    switch (attr) {
    case 75: *v = 9; break;              // compute capability major
    case 76: *v = 0; break;              // minor
    case 115: *v = 1; break;             // memory pools supported: cuMemAllocAsync
    case 16: *v = 132; break;            // multiprocessors
    case 1: *v = 1024; break;            // max threads per block
    default: *v = 1024; break;
    }
    return 0;
}
// The device's default memory pool, whose release threshold tune raises.
CUresult cuDeviceGetDefaultMemPool(void **pool, int dev) { COUNT(); *pool = handle(); return 0; }
// One attribute kept, for all pools: what was set last is what is read.
static unsigned long long pool_attribute;
CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) {
    COUNT(); pool_attribute = *(unsigned long long *)value; return 0;
}
CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value) {
    COUNT(); *(unsigned long long *)value = pool_attribute; return 0;
}
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total) {
    COUNT(); *free_b = 70ull << 30; *total = 80ull << 30; return 0;
}

// Contexts.
static __thread void *current;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    COUNT(); static void *primary; if (!primary) primary = handle(); *ctx = primary; return 0;
}
SIMPLE(cuDevicePrimaryCtxRelease_v2, int dev)
CUresult cuCtxSetCurrent(void *ctx) { COUNT(); current = ctx; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { COUNT(); *ctx = current; return 0; }
SIMPLE(cuCtxSynchronize, void)
SIMPLE(cuCtxSetFlags, unsigned flags)
CUresult cuCtxGetDevice(int *d) { COUNT(); *d = 0; return 0; }

// Memory: device pointers are host memory.
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    COUNT(); *p = (CUdeviceptr)malloc(n ? n : 1); return 0;
}
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *s) {
    COUNT(); *p = (CUdeviceptr)malloc(n ? n : 1); return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { COUNT(); free((void *)p); return 0; }
CUresult cuMemFreeAsync(CUdeviceptr p, void *s) { COUNT(); free((void *)p); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
    COUNT(); memcpy((void *)d, h, n); return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) {
    COUNT(); memcpy((void *)d, h, n); return 0;
}
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
    COUNT(); memcpy(h, (void *)d, n); return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s) {
    COUNT(); memcpy(h, (void *)d, n); return 0;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s_, size_t n) {
    COUNT(); memmove((void *)d, (void *)s_, n); return 0;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s_, size_t n, void *s) {
    COUNT(); memmove((void *)d, (void *)s_, n); return 0;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *s) {
    COUNT(); memset((void *)d, v, n); return 0;
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
    COUNT(); memset((void *)d, v, n); return 0;
}
SIMPLE(cuMemcpy2DAsync_v2, const void *copy, void *s)
SIMPLE(cuMemsetD32Async, CUdeviceptr d, unsigned v, size_t n, void *s)
SIMPLE(cuMemsetD16Async, CUdeviceptr d, unsigned short v, size_t n, void *s)
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) {
    COUNT(); *p = malloc(n ? n : 1); return 0;
}
CUresult cuMemFreeHost(void *p) { COUNT(); free(p); return 0; }
SIMPLE(cuMemHostRegister_v2, void *p, size_t n, unsigned flags)
SIMPLE(cuMemHostUnregister, void *p)
SIMPLE(cuPointerGetAttribute, void *data, int attr, CUdeviceptr p)

// Streams, events, capture.
static __thread int capturing;
CUresult cuStreamCreate(void **s, unsigned flags) { COUNT(); *s = handle(); return 0; }
CUresult cuStreamCreateWithPriority(void **s, unsigned f, int p) { COUNT(); *s = handle(); return 0; }
SIMPLE(cuStreamDestroy_v2, void *s)
SIMPLE(cuStreamSynchronize, void *s)
SIMPLE(cuStreamWaitEvent, void *s, void *e, unsigned flags)
SIMPLE(cuStreamQuery, void *s)
CUresult cuEventCreate(void **e, unsigned flags) { COUNT(); *e = handle(); return 0; }
CUresult cuEventDestroy_v2(void *e) { COUNT(); free(e); return 0; }
SIMPLE(cuEventRecord, void *e, void *s)
SIMPLE(cuEventSynchronize, void *e)
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { COUNT(); *ms = 0; return 0; }
CUresult cuStreamIsCapturing(void *s, int *status) { COUNT(); *status = capturing; return 0; }
CUresult cuStreamBeginCapture_v2(void *s, int mode) { COUNT(); capturing = 1; return 0; }
CUresult cuStreamEndCapture(void *s, void **g) { COUNT(); capturing = 0; *g = handle(); return 0; }
CUresult cuGraphInstantiateWithFlags(void **exec, void *g, unsigned long long flags) {
    COUNT(); *exec = handle(); return 0;
}
SIMPLE(cuGraphLaunch, void *exec, void *s)
SIMPLE(cuGraphUpload, void *exec, void *s)
SIMPLE(cuGraphExecDestroy, void *exec)
SIMPLE(cuGraphDestroy, void *g)

// Modules and launches.
CUresult cuModuleLoadData(void **m, const void *image) { COUNT(); *m = handle(); return 0; }
SIMPLE(cuModuleUnload, void *m)
// candle looks its kernel up before each launch: counted by name too ("kernel <name>").
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
    COUNT();
    char key[160];
    snprintf(key, sizeof key, "kernel %s", name);
    int n = atomic_load(&used), s = -1;
    for (int i = 0; i < n && s < 0; i++)
        if (strcmp(names[i], key) == 0) s = i;
    if (s < 0) s = slot(strdup(key));
    atomic_fetch_add_explicit(&counts[s], 1, memory_order_relaxed);
    *f = strdup(name); // the handle is its name, for cuLaunchKernel
    return 0;
}
CUresult cuFuncGetAttribute(int *v, int attr, void *f) { COUNT(); *v = 1024; return 0; }
// Dynamic shared memory beyond 48 KiB, opted into per function (up to an H100's 227 KiB).
#define MAX_OPTED 64
static void *opted_f[MAX_OPTED];
static int opted_bytes[MAX_OPTED];
static atomic_int opted;
CUresult cuFuncSetAttribute(void *f, int attr, int v) {
    COUNT();
    if (attr == 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */) {
        if (v > 227 * 1024) return 1;
        int i = atomic_fetch_add(&opted, 1);
        if (i < MAX_OPTED) { opted_f[i] = f; opted_bytes[i] = v; }
    }
    return 0;
}
static unsigned shared_allowed(void *f) {
    int n = atomic_load(&opted);
    for (int i = 0; i < n && i < MAX_OPTED; i++)
        if (opted_f[i] == f) return (unsigned)opted_bytes[i];
    return 48 * 1024;
}
// tune's own kernels, compiled for the host (null-cuda-kernels.cpp), run where asked.
int null_cuda_run(const char *name, unsigned gx, unsigned gy, unsigned bx, void **params);
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *s, void **params,
                        void **extra) {
    COUNT();
    // A launch an H100/H200 refuses fails here too (CUDA_ERROR_INVALID_VALUE), so that a
    // grid or block shape computed wrongly for a large pack shows without a GPU: a block of
    // at most 1024 threads (z at most 64), a grid of at most 65,535 rows and layers, and no
    // more dynamic shared memory than 48 KiB or what the kernel opted into.
    if (bx == 0 || by == 0 || bz == 0 || gx == 0 || gy == 0 || gz == 0 ||
        (unsigned long long)bx * by * bz > 1024 || bz > 64 || gx > 0x7fffffffu ||
        gy > 65535 || gz > 65535 || shared > shared_allowed(f)) {
        fprintf(stderr, "null-cuda: a GPU refuses the launch of %s: grid (%u, %u, %u), "
                "block (%u, %u, %u), %u bytes of shared memory\n",
                (const char *)f, gx, gy, gz, bx, by, bz, shared);
        return 1;
    }
    static int run = -1;
    if (run < 0) run = getenv("NULL_CUDA_RUN_KERNELS") != NULL;
    if (run) null_cuda_run((const char *)f, gx, gy, bx, params);
    return 0;
}
CUresult cuGetErrorString(CUresult e, const char **s) { COUNT(); *s = "null-cuda"; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { COUNT(); *s = "NULL_CUDA"; return 0; }

// cuBLAS (candle's matmuls).
CUresult cublasCreate_v2(void **h) { COUNT(); *h = handle(); return 0; }
SIMPLE(cublasDestroy_v2, void *h)
SIMPLE(cublasSetStream_v2, void *h, void *s)
SIMPLE(cublasSetMathMode, void *h, int mode)
SIMPLE(cublasSetWorkspace_v2, void *h, void *w, size_t n)
SIMPLE(cublasSgemm_v2, void *h, int ta, int tb, int m, int n, int k, const float *alpha,
       const float *a, int lda, const float *b, int ldb, const float *beta, float *c, int ldc)
SIMPLE(cublasSgemmStridedBatched, void *h, int ta, int tb, int m, int n, int k,
       const float *alpha, const float *a, int lda, long long sa, const float *b, int ldb,
       long long sb, const float *beta, float *c, int ldc, long long sc, int batch)
SIMPLE(cublasGemmStridedBatchedEx, void *h, int ta, int tb, int m, int n, int k,
       const void *alpha, const void *a, int at, int lda, long long sa, const void *b, int bt,
       int ldb, long long sb, const void *beta, void *c, int ct, int ldc, long long sc,
       int batch, int compute, int algo)
SIMPLE(cublasGemmEx, void *h, int ta, int tb, int m, int n, int k, const void *alpha,
       const void *a, int at, int lda, const void *b, int bt, int ldb, const void *beta,
       void *c, int ct, int ldc, int compute, int algo)

// cuRAND (candle makes a generator per device).
CUresult curandCreateGenerator(void **g, int kind) { COUNT(); *g = handle(); return 0; }
SIMPLE(curandDestroyGenerator, void *g)
SIMPLE(curandSetPseudoRandomGeneratorSeed, void *g, unsigned long long seed)
SIMPLE(curandSetStream, void *g, void *s)
SIMPLE(curandSetGeneratorOffset, void *g, unsigned long long o)
SIMPLE(curandGenerateUniform, void *g, float *out, size_t n)
SIMPLE(curandGenerateNormal, void *g, float *out, size_t n, float mean, float std)
