// A GPU pack's loss and its gradient at the logits (src/fused_loss.rs): one block per member,
// each thread a row at a time. For row g of member k: the logits z + bias, their max m and
// s = sum(exp(z + bias - m)); the gradient at class c is (c == target ? w : 0) +
// exp(z_c + bias_c - m) * (-w / s); the row's loss term is (z_t + bias_t - m - log s) * own.
// The block sums its rows' terms in a fixed tree (the same sum on every run) and writes
// losses[k] minus it, then each class's gradient summed over the member's rows the same way:
// the output bias's gradient. The arithmetic is `row` in fused_loss.rs, operation for operation.
#include <stdint.h>

#define THREADS 256

// The block's values (one a thread) summed in a fixed tree through `partial`, the same sum
// on every run; every thread of the block calls it and gets the sum. The first barrier lets
// every thread read the last sum (and write what the block reads after) before `partial`
// is written again.
__device__ static float block_sum(float *partial, float value)
{
    __syncthreads();
    partial[threadIdx.x] = value;
    __syncthreads();
    for (uint32_t half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            partial[threadIdx.x] += partial[threadIdx.x + half];
        }
        __syncthreads();
    }
    return partial[0];
}

// A row's largest logit (z + bias) into *max and the sum of exp(logit - max), in class
// order: `max_and_sum` in fused_loss.rs.
__device__ static float softmax_parts(const float *z, const float *b, uint32_t classes,
                                      float *max)
{
    float m = -INFINITY;
    for (uint32_t c = 0; c < classes; c++) {
        m = fmaxf(m, z[c] + b[c]);
    }
    float sum = 0.0f;
    for (uint32_t c = 0; c < classes; c++) {
        sum += expf((z[c] + b[c]) - m);
    }
    *max = m;
    return sum;
}

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
        float max;
        const float sum = softmax_parts(zg, b, classes, &max);
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
    const float total = block_sum(partial, term);
    const uint64_t n = (uint64_t)gridDim.x * rows;
    if (threadIdx.x == 0) {
        out[n * classes + k] = losses[k] - total;
    }
    // The output bias's gradient: each class's column of the member's rows, each thread
    // summing its rows in order, then the threads in the same tree (the sum's barriers put
    // every row's gradient in place).
    float *at_bias = out + n * classes + gridDim.x + (uint64_t)k * classes;
    for (uint32_t c = 0; c < classes; c++) {
        float column = 0.0f;
        for (uint32_t r = threadIdx.x; r < rows; r += THREADS) {
            column += out[((uint64_t)k * rows + r) * classes + c];
        }
        const float sum = block_sum(partial, column);
        if (threadIdx.x == 0) {
            at_bias[c] = sum;
        }
    }
}

// A GPU pack's validation (src/fused_loss.rs `SoftmaxScore`): one block per member, every
// member scoring the same `rows`, each thread a row at a time. For row r of member k: the
// logits z + bias, their max m and s = sum(exp(z + bias - m)) as above; its loss term
// (z_t + bias_t - m - log s), and a hit where the first of its largest logits is its
// target's. The block sums both in the fixed tree: out[k] is the terms' sum times `scale`,
// out[K + k] the hits. The arithmetic is `score_row` in fused_loss.rs, operation for
// operation.
extern "C" __global__ void softmax_score_f32(
    const uint32_t rows, const uint32_t classes, const float scale, const float *z,
    const float *bias, const uint32_t *targets, float *out)
{
    __shared__ float partial[THREADS];
    const uint32_t k = blockIdx.x;
    const float *b = bias + (uint64_t)k * classes;
    float term = 0.0f, hits = 0.0f;
    for (uint32_t r = threadIdx.x; r < rows; r += THREADS) {
        const float *zr = z + ((uint64_t)k * rows + r) * classes;
        float max;
        const float sum = softmax_parts(zr, b, classes, &max);
        // The first of the largest logits, as candle's argmax takes it.
        uint32_t first = 0;
        float top = zr[0] + b[0];
        for (uint32_t c = 1; c < classes; c++) {
            if (zr[c] + b[c] > top) {
                top = zr[c] + b[c];
                first = c;
            }
        }
        const uint32_t t = targets[r];
        term += ((zr[t] + b[t]) - max) - logf(sum);
        hits += first == t ? 1.0f : 0.0f;
    }
    const float total = block_sum(partial, term);
    const float hit = block_sum(partial, hits);
    if (threadIdx.x == 0) {
        out[k] = total * scale;
        out[gridDim.x + k] = hit;
    }
}
