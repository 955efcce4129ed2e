/* The compact per-output facts of a row (result.h, kv_output_facts): a
 * content hash of what the kernel wrote and its ulp error against what
 * the row judged it by. Shared by the golden, variants and accuracy
 * checks, so every row that judges outputs carries the same facts and a
 * run-to-run comparison reads them alike. */
#ifndef KV_RUNNER_OUT_FACTS_H
#define KV_RUNNER_OUT_FACTS_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/tensor.h"
#include "runner/check/result.h"

/* The ulp error of one real component: truth and got point at one element
 * component of real dtype rd (f16, bf16, f32, f64). 0 when bit-equal or
 * both NaN, -1 when exactly one is NaN, else the ordered-line distance
 * (runner/check/compare.h, kv_ulp_distance_bits). *tb and *gb get the
 * two bit patterns (either may be NULL). */
double kv_ulp_component_error(kv_dtype rd, const char *truth, const char *got, uint64_t *tb, uint64_t *gb);
/* Bytes of one real component of rd. */
int kv_ulp_component_width(kv_dtype rd);
/* Whether bits b of real dtype rd are a NaN. */
bool kv_ulp_component_is_nan(kv_dtype rd, uint64_t b);

/* Records output `i` of r: the hash of got and, when expected is a
 * floating tensor of got's dtype and shape, its ulp facts. Outputs past
 * KV_RESULT_MAX_OUTPUTS are left out; r->nouts grows to i + 1. A hash
 * that cannot be computed leaves hash_set false (facts are a report's
 * extra, never a reason to fail the row). */
void kv_out_facts_record(kv_check_result *r, int i, const kv_tensor *expected, const kv_tensor *got);

#endif
