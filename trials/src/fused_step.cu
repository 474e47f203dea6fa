// A fused pack's optimizer update (src/fused_step.rs): for each of a pack's stacked weights
// `p` (K members x `per_member` elements) at once, one pass over it, its gradient `g` and its
// optimizer state `state` (`slots` x K x `per_member`), into its part of `out` ((1 + slots) x
// K x `per_member`: the new weight, then the new state). The arithmetic is `update` in fused_step.rs, operation for operation;
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

// A launch's weights, by value (`Tensors` in fused_step.rs): weight i's pointers, its
// elements, elements per member, where its new value starts in `out` (its new state follows
// it) and its optimizer slots.
#define MAX_TENSORS 32
struct Tensors {
    uint64_t p[MAX_TENSORS];
    uint64_t g[MAX_TENSORS];
    uint64_t s[MAX_TENSORS];
    uint64_t numel[MAX_TENSORS];
    uint64_t per[MAX_TENSORS];
    uint64_t at[MAX_TENSORS];
    uint32_t slots[MAX_TENSORS];
};

// blockIdx.y picks the weight; the x blocks stride over its elements.
extern "C" __global__ void fused_step_f32(
    const uint32_t count, const uint32_t decay, const uint32_t nesterov,
    const struct Tensors t, const float *coefficients, float *out_all)
{
    const uint32_t i = blockIdx.y;
    if (i >= count) {
        return;
    }
    const uint64_t numel = t.numel[i], per_member = t.per[i];
    const uint32_t slots = t.slots[i];
    const float *p = (const float *)t.p[i];
    const float *g = (const float *)t.g[i];
    const float *state = (const float *)t.s[i];
    float *out = out_all + t.at[i];
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
