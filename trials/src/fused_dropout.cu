// A pack's dropout masks drawn on the GPU (src/fused_dropout.rs): each thread one value of a
// chunk of ticks' masks, row y of the grid one block (a site of a tick) of the table. A
// member's own element (r, u) is its stream's draw e = start + r * own_units + u: ChaCha8 as
// rand_chacha's ChaCha8Rng computes it (the key, a 64-bit block counter, a 64-bit stream),
// block e / 8, words 2 (e % 8) and the next as one u64, low word first; the unit is kept
// where the draw's top 53 bits reach the member's threshold (rand's `random::<f64>() >= p`).
// `chacha8_u64` and `value` in fused_dropout.rs compute the same, operation for operation.
#include <stdint.h>

#define MEMBER_WORDS 16
#define BLOCK_HEAD 4
#define PART_WORDS 4

__device__ static inline uint32_t rotl32(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

__device__ static inline uint64_t join(const uint32_t *words)
{
    return (uint64_t)words[0] | ((uint64_t)words[1] << 32);
}

#define QUARTER(a, b, c, d)                                                                    \
    x[a] += x[b]; x[d] = rotl32(x[d] ^ x[a], 16);                                              \
    x[c] += x[d]; x[b] = rotl32(x[b] ^ x[c], 12);                                              \
    x[a] += x[b]; x[d] = rotl32(x[d] ^ x[a], 8);                                               \
    x[c] += x[d]; x[b] = rotl32(x[b] ^ x[c], 7);

__device__ static uint64_t chacha8_u64(const uint32_t *key, uint64_t stream, uint64_t e)
{
    const uint64_t block = e / 8;
    const uint32_t w = (uint32_t)(e % 8) * 2;
    const uint32_t input[16] = {
        0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u,
        key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7],
        (uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32),
    };
    uint32_t x[16];
    for (int i = 0; i < 16; i++) {
        x[i] = input[i];
    }
    for (int round = 0; round < 4; round++) {
        QUARTER(0, 4, 8, 12)
        QUARTER(1, 5, 9, 13)
        QUARTER(2, 6, 10, 14)
        QUARTER(3, 7, 11, 15)
        QUARTER(0, 5, 10, 15)
        QUARTER(1, 6, 11, 12)
        QUARTER(2, 7, 8, 13)
        QUARTER(3, 4, 9, 14)
    }
    const uint32_t lo = x[w] + input[w], hi = x[w + 1] + input[w + 1];
    return (uint64_t)lo | ((uint64_t)hi << 32);
}

// The member's scale where kept, 0 where dropped or padding, its scale where it has no rows.
__device__ static float value(const uint32_t *member, const uint32_t *part, uint64_t r,
                              uint64_t u)
{
    const float scale = __uint_as_float(member[12]);
    const uint64_t own_rows = part[0], own_units = part[1];
    if (own_rows == 0) {
        return scale;
    }
    if (r >= own_rows || u >= own_units) {
        return 0.0f;
    }
    const uint64_t threshold = join(member + 10);
    if (threshold == 0) {
        return scale;
    }
    const uint64_t e = join(part + 2) + r * own_units + u;
    return (chacha8_u64(member, join(member + 8), e) >> 11) >= threshold ? scale : 0.0f;
}

extern "C" __global__ void dropout_masks_f32(
    const uint32_t members, const uint32_t first_block, const uint64_t start,
    const uint32_t *table, float *out)
{
    const uint64_t block_words = BLOCK_HEAD + (uint64_t)PART_WORDS * members;
    const uint32_t *head =
        table + (uint64_t)members * MEMBER_WORDS + (first_block + blockIdx.y) * block_words;
    const uint64_t rows = head[0], units = head[1];
    const uint64_t per_member = rows * units, n = members * per_member;
    float *values = out + (join(head + 2) - start);
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t k = i / per_member, at = i % per_member;
        values[i] = value(table + k * MEMBER_WORDS, head + BLOCK_HEAD + k * PART_WORDS,
                          at / units, at % units);
    }
}
