/* Per-output facts (runner/check/out_facts.h). */
#include "runner/check/out_facts.h"

#include <math.h>
#include <string.h>

#include "runner/check/compare.h"
#include "runner/check/ulp_hist.h"
#include "runner/golden/hash.h"

int kv_ulp_component_width(kv_dtype rd) {
    switch (rd) {
    case KV_F16:
    case KV_BF16: return 2;
    case KV_F32: return 4;
    default: return 8;
    }
}

static uint64_t facts_bits(kv_dtype rd, const char *p) {
    uint64_t b = 0;
    switch (kv_ulp_component_width(rd)) {
    case 2: {
        uint16_t h;
        memcpy(&h, p, 2);
        b = h;
        break;
    }
    case 4: {
        uint32_t u;
        memcpy(&u, p, 4);
        b = u;
        break;
    }
    default: memcpy(&b, p, 8); break;
    }
    return b;
}

bool kv_ulp_component_is_nan(kv_dtype rd, uint64_t b) {
    switch (rd) {
    case KV_F16: return (b & 0x7C00u) == 0x7C00u && (b & 0x03FFu) != 0;
    case KV_BF16: return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0;
    case KV_F32: return (b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0;
    default: return (b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull && (b & 0x000FFFFFFFFFFFFFull) != 0;
    }
}

double kv_ulp_component_error(kv_dtype rd, const char *truth, const char *got, uint64_t *tb, uint64_t *gb) {
    const uint64_t t = facts_bits(rd, truth), g = facts_bits(rd, got);
    if (tb != NULL) *tb = t;
    if (gb != NULL) *gb = g;
    const bool tn = kv_ulp_component_is_nan(rd, t), gn = kv_ulp_component_is_nan(rd, g);
    if (tn || gn) return (tn && gn) ? 0.0 : -1.0;
    return t == g ? 0.0 : kv_ulp_distance_bits(rd, t, g);
}

/* The ulp facts of got against expected (same dtype and shape, floating). */
static void facts_measure(const kv_tensor *expected, const kv_tensor *got, kv_output_facts *f) {
    const kv_dtype rd = kv_dtype_to_real(expected->dtype);
    const int parts = kv_dtype_is_complex(expected->dtype) ? 2 : 1;
    const int w = kv_ulp_component_width(rd);
    const int64_t n = kv_tensor_numel(expected);
    int64_t hist[KV_ULP_BINS] = { 0 };
    int64_t idx[KV_MAX_DIMS] = { 0 };
    double max = 0.0;
    for (int64_t lin = 0; lin < n; lin++) {
        const char *pe = kv_tensor_element(expected, idx);
        const char *pg = kv_tensor_element(got, idx);
        for (int k = 0; k < parts; k++) {
            const double u = kv_ulp_component_error(rd, pe + k * w, pg + k * w, NULL, NULL);
            hist[kv_ulp_bin(u)]++;
            /* In ulps, as the accuracy report counts: a NaN of another
             * payload is still the right NaN. The hash tells bit changes. */
            if (u != 0.0) f->not_cr++;
            const double rank = u < 0 ? INFINITY : u;
            if (rank > max) max = rank;
        }
        for (int d = expected->ndim - 1; d >= 0; d--) {
            if (++idx[d] < expected->sizes[d]) break;
            idx[d] = 0;
        }
    }
    f->elements = n * parts;
    f->max_ulp = max;
    f->p999_ulp = kv_ulp_quantile(hist, 0.999, max);
}

void kv_out_facts_record(kv_check_result *r, int i, const kv_tensor *expected, const kv_tensor *got) {
    if (r == NULL || got == NULL || i < 0 || i >= KV_RESULT_MAX_OUTPUTS) return;
    kv_output_facts *f = &r->outs[i];
    memset(f, 0, sizeof *f);
    if (i >= r->nouts) r->nouts = i + 1;
    uint64_t h = 0;
    if (kv_hash_tensor(got, &h) == KV_OK) {
        f->hash = h;
        f->hash_set = true;
    } else {
        kv_error_clear();
    }
    if (expected == NULL || expected->dtype != got->dtype || kv_dtype_is_integral(got->dtype, true) ||
        !kv_same_shape(expected, got))
        return;
    facts_measure(expected, got, f);
}
