// A GPU pack's dense ReLU layers around their matmuls (src/fused_dense.rs): one pass over a
// layer's (K, rows, width) elements each way. `per_member` is rows * width; each optional
// input comes with a flag, and an absent one's pointer is not read. The arithmetic is
// `forward` and `backward` in fused_dense.rs, operation for operation.
#include <stdint.h>

// Out: z (numel), then the layer's output (numel).
extern "C" __global__ void dense_forward_f32(
    const uint64_t numel, const uint64_t per_member, const uint64_t width,
    const uint32_t with_bias, const uint32_t with_mask, const uint32_t with_has,
    const uint32_t with_input,
    const float *product, const float *bias, const float *mask, const uint8_t *has,
    const float *input, float *out)
{
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < numel;
         e += (uint64_t)blockDim.x * gridDim.x) {
        const uint64_t k = e / per_member;
        const float z = product[e] + (with_bias ? bias[k * width + e % width] : 0.0f);
        const float a = z > 0.0f ? z : 0.0f;
        const float o = with_mask ? a * mask[e] : a;
        const int keeps = !with_has || has[k] != 0;
        out[e] = z;
        out[numel + e] = keeps ? o : (with_input ? input[e] : 0.0f);
    }
}

// A block of dense_backward_f32: COLUMNS adjacent columns (a warp's: each row's reads and
// writes coalesce), each walked by LANES threads, lane l taking rows l, l + LANES, ...
#define COLUMNS 32
#define LANES 16

// Out: the gradient at z (numel), then, with `has`, the gradient passed down (numel), then the
// bias's gradient (members * width): each member's column of the gradient at z summed over
// its rows, each lane's rows in order, then the lanes in a fixed tree (`column_sum` in
// fused_dense.rs), so the bias needs no reduction kernel of its own.
extern "C" __global__ void dense_backward_f32(
    const uint64_t numel, const uint64_t per_member, const uint64_t width,
    const uint32_t with_carried, const uint32_t with_z, const uint32_t with_mask,
    const uint32_t with_has,
    const float *at_x, const float *carried, const float *z, const float *mask,
    const uint8_t *has, float *out)
{
    __shared__ float partial[LANES][COLUMNS];
    const uint64_t columns = numel / per_member * width, rows = per_member / width;
    float *at_bias = out + (with_has ? 2 : 1) * numel;
    const uint32_t tx = threadIdx.x % COLUMNS, lane = threadIdx.x / COLUMNS;
    // Every thread of the block takes every tile, so the barriers are the whole block's.
    for (uint64_t first = (uint64_t)blockIdx.x * COLUMNS; first < columns;
         first += (uint64_t)gridDim.x * COLUMNS) {
        const uint64_t c = first + tx;
        float sum = 0.0f;
        if (c < columns) {
            const uint64_t k = c / width;
            const int keeps = !with_has || has[k] != 0;
            for (uint64_t r = lane; r < rows; r += LANES) {
                const uint64_t e = k * per_member + r * width + c % width;
                const float total = with_carried ? carried[e] + at_x[e] : at_x[e];
                const float at_out = keeps ? total : 0.0f;
                const float at_a = with_mask ? at_out * mask[e] : at_out;
                const float at_z = (!with_z || z[e] >= 0.0f) ? at_a : 0.0f;
                out[e] = at_z;
                sum += at_z;
                if (with_has) {
                    out[numel + e] = keeps ? 0.0f : total;
                }
            }
        }
        partial[lane][tx] = sum;
        __syncthreads();
        for (uint32_t half = LANES / 2; half > 0; half /= 2) {
            if (lane < half) {
                partial[lane][tx] += partial[lane + half][tx];
            }
            __syncthreads();
        }
        if (lane == 0 && c < columns) {
            at_bias[c] = partial[0][tx];
        }
        __syncthreads();
    }
}
