/* An f64 dot product that says what the exact sum is, for the reference,
 * the CPU variants and the CUDA kernels alike. A header of its own, free
 * of kvsuite's other headers, because nvcc compiles it into device code
 * (cuda_elem.h) where ref_shared.h's tensor headers do not belong. */
#ifndef KV_REF_DOT_RESCUE_H
#define KV_REF_DOT_RESCUE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KV_REF_HD __host__ __device__ static inline
#else
#define KV_REF_HD static inline
#endif

/* Half the power of two by which kv_ref_dot_f64_rescued scales each
 * product down: |a*b| < 2^2048, so a scaled product is below 2^928 and a
 * sum of up to 2^90 of them cannot overflow. */
#define KV_REF_RESCUE_HALF_SHIFT 560

/* sum over p ascending of a[p*as] * b[p*bs] (element strides), for a
 * plain f64 sum that came out Inf or NaN: the reference's mm family and
 * the CPU variants' recomputation of non-finite outputs and the CUDA
 * kernel (cuda_elem.h) all call it, so they cannot drift apart (README "Golden semantics"). A product of
 * finite f64 values can overflow to ±Inf though the exact sum is finite
 * (DBL_MAX*2 - DBL_MAX*1.5), and two opposite overflows give Inf - Inf =
 * NaN where the exact sum is ±Inf. So: when a term has a non-finite
 * factor, the result is the IEEE sum of those terms alone (finite terms
 * cannot change an infinity; 0*Inf and Inf - Inf are NaN, as in the exact
 * arithmetic); when every factor is finite, the products are summed
 * scaled by 2^-1120 (no overflow; what underflows is far below the op's
 * error bound, which is at least DBL_MAX*2^-53 here) and scaled back,
 * which overflows to ±Inf only where the sum really is beyond the format.
 * Only f64 needs it: f16/bf16/f32 products are exact in f64 and their
 * sums cannot overflow it. */
KV_REF_HD double kv_ref_dot_f64_rescued(const double *a, int64_t as, const double *b, int64_t bs, int64_t k) {
    double special = 0.0, scaled = 0.0;
    bool any_special = false;
    for (int64_t p = 0; p < k; p++) {
        const double x = a[p * as], y = b[p * bs];
        if (!isfinite(x) || !isfinite(y)) {
            special += x * y;
            any_special = true;
        } else {
            scaled += ldexp(x, -KV_REF_RESCUE_HALF_SHIFT) * ldexp(y, -KV_REF_RESCUE_HALF_SHIFT);
        }
    }
    return any_special ? special : ldexp(scaled, 2 * KV_REF_RESCUE_HALF_SHIFT);
}

#endif
