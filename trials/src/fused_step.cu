// A fused pack's optimizer update (src/fused_step.rs): one pass over a stacked weight `p`
// (K members x `per_member` elements), its gradient `g` and its optimizer state `state`
// (`slots` x K x `per_member`), into `out` ((1 + slots) x K x `per_member`: the new weight,
// then the new state). The arithmetic is `update` in fused_step.rs, operation for operation;
// compiled with --fmad=false so that no multiply-add is contracted into an FMA, and with
// IEEE division and square root (nvcc's defaults).
#include <stdint.h>

// The columns of a member's row of `coefficients`: `column` in fused_step.rs.
#define ADAMW 0
#define ACTIVE 1
#define WEIGHT_DECAY 2
#define BETA1 3
#define REST1 4
#define BETA2 5
#define REST2 6
#define EPS 7
#define DECAYED 8
#define UNBIAS2 9
#define STEP 10
#define COUNT 11

extern "C" __global__ void fused_step_f32(
    const uint64_t numel, const uint64_t per_member, const uint32_t slots,
    const uint32_t decay, const uint32_t nesterov,
    const float *p, const float *g, const float *state, const float *coefficients,
    float *out)
{
    for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < numel;
         e += (uint64_t)blockDim.x * gridDim.x) {
        const float *c = coefficients + (e / per_member) * COUNT;
        const float pe = p[e], ge = g[e], s0 = state[e];
        const float s1 = slots > 1 ? state[numel + e] : 0.0f;
        float np = pe, n0 = s0, n1 = s1;
        if (c[ACTIVE] != 0.0f) {
            if (c[ADAMW] != 0.0f) {
                const float kept = pe * c[DECAYED];
                n0 = s0 * c[BETA1] + ge * c[REST1];
                n1 = s1 * c[BETA2] + (ge * ge) * c[REST2];
                const float denom = sqrtf(n1) * c[UNBIAS2] + c[EPS];
                np = kept - (n0 / denom) * c[STEP];
            } else {
                const float gd = decay ? ge + pe * c[WEIGHT_DECAY] : ge;
                n0 = s0 * c[BETA1] + gd;
                const float update = nesterov ? gd + n0 * c[BETA1] : n0;
                np = pe - update * c[STEP];
            }
        }
        out[e] = np;
        out[numel + e] = n0;
        if (slots > 1) {
            out[2 * numel + e] = n1;
        }
    }
}
