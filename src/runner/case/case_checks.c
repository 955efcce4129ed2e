/* Which checks a case runs when its line does not say (--check=). */
#include "runner/case/case.h"
#include "runner/case/case_options.h"

unsigned kv_case_default_checks(kv_status expect) {
    if (expect == KV_OK) {
        return (1u << KV_CHECK_GOLDEN) | (1u << KV_CHECK_VARIANTS) | (1u << KV_CHECK_MEMORY);
    }
    /* No output to compare; memory still proves inputs are untouched and
     * nothing leaked on the error path. */
    return (1u << KV_CHECK_ERROR) | (1u << KV_CHECK_MEMORY);
}

bool kv_case_has_lazy_or_mode(const kv_case *c) {
    if (c->modes) return true;
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++)
        if (c->lazy[i]) return true;
    return false;
}

unsigned kv_case_default_checks_for(const kv_case *c) {
    /* device=accel also runs fastpath (check_fastpath.c); a plain accel
     * case leaves golden and memory (cpu memory only) to its cpu twin. */
    const unsigned accel = c->device.type == KV_DEVICE_ACCEL ? 1u << KV_CHECK_FASTPATH : 0;
    if (!kv_case_has_lazy_or_mode(c) && accel)
        return accel | (c->expect == KV_OK ? 1u << KV_CHECK_VARIANTS : 1u << KV_CHECK_ERROR);
    if (!kv_case_has_lazy_or_mode(c)) return kv_case_default_checks(c->expect);
    if (c->expect != KV_OK) return accel | 1u << KV_CHECK_LAZY;
    unsigned k = accel | (1u << KV_CHECK_GOLDEN) | (1u << KV_CHECK_LAZY);
    if (c->modes & (1u << KV_MODE_GRAD)) k |= 1u << KV_CHECK_GRAD;
    return k;
}
