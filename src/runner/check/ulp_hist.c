/* Ulp-error histograms (runner/check/ulp_hist.h). */
#include "runner/check/ulp_hist.h"

#include <math.h>
#include <stdio.h>

int kv_ulp_bin(double ulps) {
    if (!(ulps >= 0.0)) return KV_ULP_NAN_BIN;
    if (ulps < KV_ULP_EXACT_BINS) return (int)ulps;
    /* [2^k, 2^(k+1)) for k >= 4 goes to bin 12 + k. */
    const int b = 12 + ilogb(ulps);
    return b < KV_ULP_NAN_BIN ? b : KV_ULP_NAN_BIN - 1;
}

double kv_ulp_bin_upper(int b) {
    if (b >= KV_ULP_NAN_BIN) return INFINITY;
    if (b < KV_ULP_EXACT_BINS) return (double)b;
    return ldexp(1.0, b - 11) - 1.0;
}

double kv_ulp_quantile(const int64_t hist[KV_ULP_BINS], double q, double max) {
    int64_t total = 0;
    for (int b = 0; b < KV_ULP_BINS; b++) total += hist[b];
    if (total == 0) return 0.0;
    int64_t need = (int64_t)ceil(q * (double)total);
    if (need < 1) need = 1;
    int64_t seen = 0;
    for (int b = 0; b < KV_ULP_BINS; b++) {
        seen += hist[b];
        if (seen >= need) {
            const double up = kv_ulp_bin_upper(b);
            return up < max ? up : max;
        }
    }
    return max;
}

void kv_ulp_format(double ulps, char *buf, int cap) {
    if (isinf(ulps)) snprintf(buf, (size_t)cap, "inf");
    else if (ulps < 1024.0) snprintf(buf, (size_t)cap, "%.0f", ulps);
    else snprintf(buf, (size_t)cap, "2^%.1f", log2(ulps));
}
