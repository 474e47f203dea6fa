// tune's own CUDA kernels (trials/src/*.cu) compiled for the host, so that scripts/null-cuda
// can run them where a launch names one and NULL_CUDA_RUN_KERNELS=1: device memory is host
// memory there, so a custom op's CUDA path (its arguments as the Rust side passes them, the
// kernel's indexing, its block's reduction) computes real values on a machine without a
// GPU, which a test compares with the op's CPU path. Each CUDA thread of a block is a host
// thread (a block's __syncthreads is a barrier); blocks run one after another.
#include <barrier>
#include <mutex>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
static thread_local dim3 blockIdx, threadIdx;
static dim3 blockDim, gridDim;
static std::barrier<> *block_barrier;
static inline void __syncthreads() { block_barrier->arrive_and_wait(); }
#define __global__
#define __device__
#define __shared__ static
static inline float __uint_as_float(uint32_t x) {
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

#include "../trials/src/fused_step.cu"
#include "../trials/src/fused_loss.cu"
#include "../trials/src/fused_dense.cu"
#include "../trials/src/fused_dropout.cu"

// One launch at a time: the grid, the block and its barrier are the process's.
static std::mutex one_launch;

template <class Kernel> static void run(dim3 grid, dim3 block, Kernel kernel) {
    std::lock_guard<std::mutex> only(one_launch);
    gridDim = grid;
    blockDim = block;
    for (unsigned by = 0; by < grid.y; by++) {
        for (unsigned bx = 0; bx < grid.x; bx++) {
            std::barrier<> barrier(block.x);
            block_barrier = &barrier;
            std::vector<std::thread> threads;
            for (unsigned tx = 0; tx < block.x; tx++) {
                threads.emplace_back([=] {
                    blockIdx = dim3{bx, by, 0};
                    threadIdx = dim3{tx, 0, 0};
                    kernel();
                });
            }
            for (auto &t : threads) t.join();
        }
    }
}

#define ARG(i, T) (*(T *)params[i])

// Runs the kernel `name` with cuLaunchKernel's arguments; 0 if it is not one of tune's.
extern "C" int null_cuda_run(const char *name, unsigned gx, unsigned gy, unsigned bx,
                             void **params) {
    const dim3 grid{gx, gy, 1}, block{bx, 1, 1};
    if (strcmp(name, "fused_step_f32") == 0) {
        run(grid, block, [=] {
            fused_step_f32(ARG(0, uint32_t), ARG(1, uint32_t), ARG(2, uint32_t),
                           ARG(3, struct Tensors), ARG(4, const float *), ARG(5, float *));
        });
    } else if (strcmp(name, "softmax_loss_f32") == 0) {
        run(grid, block, [=] {
            softmax_loss_f32(ARG(0, uint32_t), ARG(1, uint32_t), ARG(2, uint32_t),
                             ARG(3, const float *), ARG(4, const float *),
                             ARG(5, const uint32_t *), ARG(6, const float *),
                             ARG(7, const float *), ARG(8, const float *), ARG(9, float *));
        });
    } else if (strcmp(name, "softmax_score_f32") == 0) {
        run(grid, block, [=] {
            softmax_score_f32(ARG(0, uint32_t), ARG(1, uint32_t), ARG(2, float),
                              ARG(3, const float *), ARG(4, const float *),
                              ARG(5, const uint32_t *), ARG(6, float *));
        });
    } else if (strcmp(name, "dense_forward_f32") == 0) {
        run(grid, block, [=] {
            dense_forward_f32(ARG(0, uint64_t), ARG(1, uint64_t), ARG(2, uint64_t),
                              ARG(3, uint32_t), ARG(4, uint32_t), ARG(5, uint32_t),
                              ARG(6, uint32_t), ARG(7, const float *), ARG(8, const float *),
                              ARG(9, const float *), ARG(10, const uint8_t *),
                              ARG(11, const float *), ARG(12, float *));
        });
    } else if (strcmp(name, "dense_backward_f32") == 0) {
        run(grid, block, [=] {
            dense_backward_f32(ARG(0, uint64_t), ARG(1, uint64_t), ARG(2, uint64_t),
                               ARG(3, uint32_t), ARG(4, uint32_t), ARG(5, uint32_t),
                               ARG(6, uint32_t), ARG(7, const float *), ARG(8, const float *),
                               ARG(9, const float *), ARG(10, const float *),
                               ARG(11, const uint8_t *), ARG(12, float *));
        });
    } else if (strcmp(name, "dropout_masks_f32") == 0) {
        run(grid, block, [=] {
            dropout_masks_f32(ARG(0, uint32_t), ARG(1, uint32_t), ARG(2, uint64_t),
                              ARG(3, const uint32_t *), ARG(4, float *));
        });
    } else {
        return 0;
    }
    return 1;
}
