/* Counter-based RNG: value = mix(key, counter). See kv/rng.h. */
#include "kv/rng.h"

#include <string.h>
#include <xxhash.h>

/* 2^64 / phi: the Weyl increment SplitMix64 uses; odd, so counter * it is
 * a bijection and consecutive counters land far apart before mixing. */
#define KV_RNG_GOLDEN 0x9E3779B97F4A7C15ull
/* A second odd constant, so a key and a counter with equal bits do not
 * cancel when they are combined. */
#define KV_RNG_KEY_SALT 0xD1B54A32D192ED03ull

uint64_t kv_rng_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

uint64_t kv_rng_u64(uint64_t key, uint64_t counter) {
    /* Two rounds: one mix alone of (key + counter * golden) would make
     * streams whose keys differ by a multiple of the golden ratio shifted
     * copies of each other; mixing the key first rules that out. */
    const uint64_t k = kv_rng_mix64(key * KV_RNG_KEY_SALT + KV_RNG_GOLDEN);
    return kv_rng_mix64(k ^ kv_rng_mix64((counter + 1u) * KV_RNG_GOLDEN));
}

double kv_rng_uniform(uint64_t key, uint64_t counter) {
    /* The top 53 bits scaled by 2^-53: exact, so the same on every machine. */
    return (double)(kv_rng_u64(key, counter) >> 11) * 0x1.0p-53;
}

uint64_t kv_rng_below(uint64_t key, uint64_t counter, uint64_t n) {
    if (n == 0) return 0;
    const unsigned __int128 p = (unsigned __int128)kv_rng_u64(key, counter) * n;
    return (uint64_t)(p >> 64);
}

uint64_t kv_rng_key(const char *text, uint64_t seed) {
    if (text == NULL) text = "";
    return (uint64_t)XXH3_64bits_withSeed(text, strlen(text), (XXH64_hash_t)seed);
}

uint64_t kv_rng_substream(uint64_t key, uint64_t index) {
    return kv_rng_mix64(key ^ kv_rng_mix64((index + 1u) * KV_RNG_KEY_SALT));
}
