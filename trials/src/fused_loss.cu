// A GPU pack's loss and its gradient at the logits (src/fused_loss.rs): one block per member,
// each thread a row at a time. For row g of member k: the logits z + bias, their max m and
// s = sum(exp(z + bias - m)); the gradient at class c is (c == target ? w : 0) +
// exp(z_c + bias_c - m) * (-w / s); the row's loss term is (z_t + bias_t - m - log s) * own.
// The block sums its rows' terms in a fixed tree (the same sum on every run) and writes
// losses[k] minus it, then each class's gradient summed over the member's rows the same way:
// the output bias's gradient. The arithmetic is `row` in fused_loss.rs, operation for operation.
#include <stdint.h>

#define THREADS 256

extern "C" __global__ void softmax_loss_f32(
    const uint32_t rows, const uint32_t classes, const uint32_t has_own,
    const float *z, const float *bias, const uint32_t *targets, const float *weights,
    const float *own, const float *losses, float *out)
{
    __shared__ float partial[THREADS];
    const uint32_t k = blockIdx.x;
    const float *b = bias + (uint64_t)k * classes;
    float term = 0.0f;
    for (uint32_t r = threadIdx.x; r < rows; r += THREADS) {
        const uint64_t g = (uint64_t)k * rows + r;
        const float *zg = z + g * classes;
        float *at = out + g * classes;
        float max = -INFINITY;
        for (uint32_t c = 0; c < classes; c++) {
            max = fmaxf(max, zg[c] + b[c]);
        }
        float sum = 0.0f;
        for (uint32_t c = 0; c < classes; c++) {
            sum += expf((zg[c] + b[c]) - max);
        }
        const uint32_t t = targets[g];
        const float w = weights[g];
        const float scale = -w / sum;
        for (uint32_t c = 0; c < classes; c++) {
            const float hit = c == t ? w : 0.0f;
            at[c] = hit + expf((zg[c] + b[c]) - max) * scale;
        }
        const float picked = ((zg[t] + b[t]) - max) - logf(sum);
        term += picked * (has_own ? own[g] : 1.0f);
    }
    partial[threadIdx.x] = term;
    __syncthreads();
    for (uint32_t half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            partial[threadIdx.x] += partial[threadIdx.x + half];
        }
        __syncthreads();
    }
    const uint64_t n = (uint64_t)gridDim.x * rows;
    if (threadIdx.x == 0) {
        out[n * classes + k] = losses[k] - partial[0];
    }
    // The output bias's gradient: each class's column of the member's rows, each thread
    // summing its rows in order, then the threads in the same tree (the barriers above put
    // every row's gradient in place; the first below frees `partial`).
    float *at_bias = out + n * classes + gridDim.x + (uint64_t)k * classes;
    for (uint32_t c = 0; c < classes; c++) {
        __syncthreads();
        float column = 0.0f;
        for (uint32_t r = threadIdx.x; r < rows; r += THREADS) {
            column += out[((uint64_t)k * rows + r) * classes + c];
        }
        partial[threadIdx.x] = column;
        __syncthreads();
        for (uint32_t half = THREADS / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) {
                partial[threadIdx.x] += partial[threadIdx.x + half];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            at_bias[c] = partial[0];
        }
    }
}
