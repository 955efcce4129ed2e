/* The failure classifier fed from tensors (runner/check/classify.h):
 * what the comparison saw, laid out row-major for kv_classify. */
#include <stdlib.h>
#include <string.h>

#include "kv/tune.h"
#include "ref/ref.h"
#include "runner/check/check_util.h"
#include "runner/check/classify.h"

static uint64_t ct_bits(kv_dtype dt, const char *p) {
    switch (dt) {
    case KV_F16:
    case KV_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return h;
    }
    case KV_F32: {
        uint32_t u;
        memcpy(&u, p, 4);
        return u;
    }
    case KV_F64: {
        uint64_t u;
        memcpy(&u, p, 8);
        return u;
    }
    default: return (uint64_t)kv_ref_load_i64(dt, p);
    }
}

/* Element k of t's row-major order, as bits. */
static void ct_read_all(const kv_tensor *t, uint64_t *out) {
    const int64_t n = kv_tensor_numel(t);
    const char *base = kv_tensor_data(t);
    const size_t es = kv_dtype_size(t->dtype);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        out[k] = ct_bits(t->dtype, base + off * (int64_t)es);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d]) break;
            idx[d] = 0;
        }
    }
}

static bool ct_subnormal(kv_dtype dt, uint64_t b) {
    switch (dt) {
    case KV_F16: return (b & 0x7C00u) == 0 && (b & 0x03FFu) != 0;
    case KV_BF16: return (b & 0x7F80u) == 0 && (b & 0x007Fu) != 0;
    case KV_F32: return (b & 0x7F800000u) == 0 && (b & 0x007FFFFFu) != 0;
    case KV_F64: return (b & 0x7FF0000000000000ull) == 0 && (b & 0x000FFFFFFFFFFFFFull) != 0;
    default: return false;
    }
}

/* Flags output elements fed by a subnormal element of a same-shape real
 * floating input; false when no input has a subnormal there. */
static bool ct_input_subnormal(const kv_case_inputs *in, const kv_tensor *out, uint64_t *tmp, uint8_t *flags) {
    bool any = false;
    const int64_t n = kv_tensor_numel(out);
    for (int i = 0; in != NULL && i < in->ntensors; i++) {
        const kv_tensor *t = in->tensors[i];
        if (t == NULL || !kv_same_shape(t, out) || kv_dtype_is_complex(t->dtype) ||
            kv_dtype_is_integral(t->dtype, true) || kv_tensor_data(t) == NULL)
            continue;
        ct_read_all(t, tmp);
        for (int64_t k = 0; k < n; k++)
            if (ct_subnormal(t->dtype, tmp[k])) flags[k] = 1, any = true;
    }
    return any;
}

int kv_classify_compare(const kv_case *c, const kv_case_inputs *in, const kv_tensor *expected, const kv_tensor *got,
                        const kv_tensor *alt, const char *alt_what, const kv_cmp_rule *rule, const double *bound,
                        const double *working_bound, const double *one_pass_bound, char *buf, int cap) {
    if (cap > 0) buf[0] = '\0';
    const kv_dtype dt = expected->dtype;
    if (dt != got->dtype || !kv_same_shape(expected, got) || kv_dtype_is_complex(dt) || dt == KV_BOOL) return 0;
    const int64_t n = kv_tensor_numel(expected);
    if (n == 0 || kv_tensor_data(expected) == NULL || kv_tensor_data(got) == NULL) return 0;
    uint64_t *e = malloc(sizeof *e * (size_t)n), *g = malloc(sizeof *g * (size_t)n);
    uint8_t *mask = calloc((size_t)n, 1), *sub = calloc((size_t)n, 1);
    uint8_t *wide = working_bound != NULL ? calloc((size_t)n, 1) : NULL;
    uint8_t *onep = one_pass_bound != NULL ? calloc((size_t)n, 1) : NULL;
    const bool use_alt = alt != NULL && alt->dtype == dt && kv_same_shape(alt, expected) && kv_tensor_data(alt) != NULL;
    uint64_t *a = use_alt ? malloc(sizeof *a * (size_t)n) : NULL;
    int len = 0;
    kv_cmp_report rep;
    if (e != NULL && g != NULL && mask != NULL && sub != NULL &&
        kv_compare_mask(expected, got, rule, bound, &rep, mask) == KV_OK && rep.mismatched > 0) {
        ct_read_all(expected, e);
        ct_read_all(got, g);
        kv_classify_in ci = { .dtype = dt, .ndim = expected->ndim, .numel = n, .expected = e, .got = g,
                              .mismatched = mask, .ninputs = c->ninputs };
        memcpy(ci.sizes, expected->sizes, sizeof(int64_t) * (size_t)expected->ndim);
        memcpy(ci.layouts, c->layouts, sizeof ci.layouts);
        /* A transposed alias is a partial overlap every path refuses; an
         * interleaved one shares no element. */
        if (!c->out_alias_t && !c->out_alias_i) ci.out_alias = c->out_alias;
        if (a != NULL) {
            ct_read_all(alt, a);
            ci.alt = a;
            ci.alt_what = alt_what;
        }
        /* Within the working-precision bound: not mismatched under it. */
        kv_cmp_report wrep;
        if (wide != NULL && kv_compare_mask(expected, got, rule, working_bound, &wrep, wide) == KV_OK) {
            for (int64_t k = 0; k < n; k++) wide[k] = !wide[k];
            ci.within_working = wide;
        }
        if (onep != NULL && kv_compare_mask(expected, got, rule, one_pass_bound, &wrep, onep) == KV_OK) {
            for (int64_t k = 0; k < n; k++) onep[k] = !onep[k];
            ci.within_one_pass = onep;
        }
        for (int i = 0; in != NULL && i < in->ntensors; i++) {
            if (in->tensors[i] != NULL && kv_tensor_numel(in->tensors[i]) == 0) ci.empty_input = true;
            if (i < KV_CASE_MAX_INPUTS)
                ci.input_other_shape[i] = in->tensors[i] == NULL || !kv_same_shape(in->tensors[i], expected);
        }
        uint64_t *tmp = malloc(sizeof *tmp * (size_t)n);
        if (tmp != NULL && ct_input_subnormal(in, expected, tmp, sub)) ci.input_subnormal = sub;
        free(tmp);
        len = kv_classify(&ci, buf, cap);
    }
    free(a);
    free(e);
    free(g);
    free(mask);
    free(sub);
    free(wide);
    free(onep);
    return len;
}

kv_tensor *kv_classify_alpha_one(const kv_op *op, kv_case_inputs *ref_in, int i) {
    const kv_schema *s = kv_op_schema(op);
    int a = -1;
    for (int k = 0; k < s->nargs && k < ref_in->nargs; k++) {
        /* Running the op again on ref_in must leave it as it was. */
        if (kv_check_arg_is_mutated(op, k)) return NULL;
        if (strcmp(s->args[k].name, "alpha") == 0 && ref_in->args[k].tag == KV_IV_SCALAR) a = k;
    }
    if (a < 0) return NULL;
    const kv_ivalue saved = ref_in->args[a];
    const kv_scalar v = saved.v.scalar;
    if ((v.kind == KV_SCALAR_INT && v.v.i == 1) || (v.kind == KV_SCALAR_DOUBLE && v.v.d == 1.0) ||
        (v.kind == KV_SCALAR_BOOL && v.v.b) || v.kind == KV_SCALAR_COMPLEX)
        return NULL;
    ref_in->args[a].v.scalar = (kv_scalar){ .kind = KV_SCALAR_INT, .v.i = 1 };
    kv_case_outputs out;
    const bool was_ref = kv_tune_reference_mode_set(true);
    kv_status st = kv_case_invoke(op, ref_in, kv_keyset_of(KV_KEY_CPU), &out);
    kv_tune_reference_mode_set(was_ref);
    ref_in->args[a] = saved;
    /* kv_case_invoke leaves nothing to free when it fails. */
    if (st != KV_OK) {
        kv_error_clear();
        return NULL;
    }
    kv_tensor *t = NULL;
    if (kv_check_materialize(&out) == KV_OK && i < out.n) {
        t = out.t[i];
        out.t[i] = NULL;
    }
    kv_case_outputs_free(&out);
    kv_error_clear();
    return t;
}
