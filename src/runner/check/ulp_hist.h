/* Ulp-error histograms: what the accuracy check records per row and the
 * accuracy report merges per backend x variant x op x dtype. Bins are exact
 * for small errors (0..15 ulp), where the interesting percentiles of a
 * math library sit, and binary orders of magnitude above, so one row stays
 * small enough to travel through the worker socket and a percentile
 * computed from merged rows is exact below 16 ulp and an upper bound
 * above. */
#ifndef KV_RUNNER_ULP_HIST_H
#define KV_RUNNER_ULP_HIST_H

#include <stdint.h>

#include "runner/check/result.h"

#define KV_ULP_EXACT_BINS 16
#define KV_ULP_NAN_BIN (KV_ULP_BINS - 1)

/* The bin of an error of `ulps` (a whole number >= 0); ulps < 0 (NaN-ness
 * differs) is KV_ULP_NAN_BIN. */
int kv_ulp_bin(double ulps);
/* The largest error bin b holds (+Inf for the NaN bin). */
double kv_ulp_bin_upper(int b);
/* The q-quantile (0 < q <= 1) of the histogram: the smallest error e with
 * at least ceil(q * total) elements at or below it, exact in the exact
 * bins, the bin's upper end (capped at max) above. 0 for an empty one. */
double kv_ulp_quantile(const int64_t hist[KV_ULP_BINS], double q, double max);
/* "0", "3", "2^20", "inf": an error for tables. */
void kv_ulp_format(double ulps, char *buf, int cap);

#endif
