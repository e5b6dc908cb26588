/* kernels/philox.h — the counter-based RNG behind every random op.
 *
 * Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
 * 1, 2, 3", SC 2011): a keyed bijection of a 128-bit counter. Nothing is stateful,
 * so any element of any mask can be drawn independently, in any order, on any
 * device: the CPU kernels and the CUDA kernels include this same file and make the
 * same keep/drop decision for the same element, bit for bit. Decisions compare a
 * uint32 draw with a uint32-range threshold (pk_rng_threshold); no float rounding is
 * ever involved, so no device can disagree. How key and counter are formed from
 * (seed, op, microbatch, element): pk_rng_block.
 *
 * Pure C99/C11 (and CUDA C under NVRTC, where <stdint.h> may be missing); no state,
 * no allocation, no dependencies.
 */
#ifndef PD2BW_PHILOX_H
#define PD2BW_PHILOX_H

#if defined(__CUDACC_RTC__)
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

#if defined(__CUDACC__)
#define PHILOX_FN static __host__ __device__ __forceinline__
#else
#define PHILOX_FN static inline
#endif

/* The Philox4x32 constants from Random123 (philox.h): multipliers and the Weyl key
 * increments (golden ratio and sqrt(3)-1 in 0.32 fixed point). */
#define PHILOX_M4x32_0 0xD2511F53u
#define PHILOX_M4x32_1 0xCD9E8D57u
#define PHILOX_W32_0 0x9E3779B9u
#define PHILOX_W32_1 0xBB67AE85u

typedef struct PhiloxCtr {
  uint32_t v[4];
} PhiloxCtr;

typedef struct PhiloxKey {
  uint32_t v[2];
} PhiloxKey;

PHILOX_FN void philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

/* One Philox S-box round (Random123's _philox4x32round). */
PHILOX_FN PhiloxCtr philox_round(PhiloxCtr c, PhiloxKey k) {
  uint32_t hi0, lo0, hi1, lo1;
  philox_mulhilo(PHILOX_M4x32_0, c.v[0], &hi0, &lo0);
  philox_mulhilo(PHILOX_M4x32_1, c.v[2], &hi1, &lo1);
  PhiloxCtr r;
  r.v[0] = hi1 ^ c.v[1] ^ k.v[0];
  r.v[1] = lo1;
  r.v[2] = hi0 ^ c.v[3] ^ k.v[1];
  r.v[3] = lo0;
  return r;
}

/* Philox4x32-10: ten rounds, the key bumped between consecutive rounds. */
PHILOX_FN PhiloxCtr philox4x32_10(PhiloxCtr c, PhiloxKey k) {
  for (int i = 0; i < 10; i++) {
    if (i > 0) {
      k.v[0] += PHILOX_W32_0;
      k.v[1] += PHILOX_W32_1;
    }
    c = philox_round(c, k);
  }
  return c;
}

/* pd2bw's key/counter convention, one stream per random op and microbatch: the four
 * draws for elements 4*block .. 4*block+3 of op `op`'s mask in microbatch `microbatch`,
 *     key     = { seed bits 0..31, seed bits 32..63 }        (the training seed)
 *     counter = { e/4 bits 0..31,  e/4 bits 32..63,  microbatch, op id }
 * where e is the element's flat index inside the op's per-microbatch tensor (for
 * attention: ((b*heads + h)*T + t_query)*T + t_key) and "microbatch" is the
 * microbatch's global index (the same number on every stage and replica, so a
 * replayed backward or a recomputed forward draws the same mask). Word e%4 of the
 * block is element e's draw. The 64-bit seed fills the key so that two seeds never
 * share a stream; the op id sits in the counter, which is equally a bijection. */
PHILOX_FN PhiloxCtr pk_rng_block(uint64_t seed, uint32_t op, uint32_t microbatch,
                                 uint64_t block) {
  PhiloxCtr c;
  c.v[0] = (uint32_t)block;
  c.v[1] = (uint32_t)(block >> 32);
  c.v[2] = microbatch;
  c.v[3] = op;
  PhiloxKey k;
  k.v[0] = (uint32_t)seed;
  k.v[1] = (uint32_t)(seed >> 32);
  return philox4x32_10(c, k);
}

/* The draw for one element (convenience; kernels draw whole blocks of four). */
PHILOX_FN uint32_t pk_rng_u32(uint64_t seed, uint32_t op, uint32_t microbatch, uint64_t e) {
  return pk_rng_block(seed, op, microbatch, e >> 2).v[e & 3];
}

/* Dropout threshold for probability p: an element is DROPPED iff its draw r
 * satisfies (uint64_t)r < threshold, so P(drop) = threshold / 2^32 = p up to 2^-32.
 * p <= 0 gives 0 (keep all), p >= 1 gives 2^32 (drop all). Computed on the host
 * once; multiplying by 2^32 is exact in double, the truncation deterministic. */
PHILOX_FN uint64_t pk_rng_threshold(double p) {
  if (!(p > 0.0)) return 0;
  if (p >= 1.0) return (uint64_t)1 << 32;
  return (uint64_t)(p * 4294967296.0);
}

#endif /* PD2BW_PHILOX_H */
