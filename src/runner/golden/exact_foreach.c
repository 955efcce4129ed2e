/* The exact goldens of the foreach ops (runner/golden/exact.h): element i
 * of the result is the truth of the per-tensor op on element i of each
 * list, computed by the binary family as for add.Tensor / add_.Tensor
 * (alpha included) and, for _foreach_mul.Scalar, as self * scalar with
 * the scalar rounded as the reference rounds it. */
#include "runner/golden/exact.h"

#include "ref/ref.h"

#include <stdlib.h>
#include <string.h>

/* One element's call: its inputs as a two- or three-argument case. */
static kv_status exact_foreach_element(const kv_exact_call *x, const char *elem_op, int i, kv_case_inputs *fin) {
    const kv_tensor_list self = x->in->args[0].v.tensors;
    fin->nargs = 0;
    fin->args[fin->nargs++] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = self.items[i] };
    if (x->in->args[1].tag == KV_IV_TENSOR_LIST) {
        fin->args[fin->nargs++] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = x->in->args[1].v.tensors.items[i] };
        fin->args[fin->nargs++] = x->in->args[2]; /* alpha */
    } else {
        fin->args[fin->nargs++] = x->in->args[1]; /* the scalar */
    }
    kv_case_outputs fo = { .n = 1, .t = { x->out->t[i] } };
    const kv_exact_call ex = { x->c, x->op, elem_op, fin, &fo, x->stats };
    return strcmp(elem_op, "mul.Scalar") == 0 ? kv_exact_mul_scalar(&ex) : kv_exact_binary(&ex);
}

kv_status kv_exact_foreach(const kv_exact_call *x) {
    /* mul.Scalar: self times a Scalar argument, not mul.Tensor's two tensors. */
    const char *elem_op = strcmp(x->name, "_foreach_mul.Scalar") == 0 ? "mul.Scalar" : kv_ref_foreach_element_op(x->name);
    if (elem_op == NULL || x->in->nargs < 2 || x->in->args[0].tag != KV_IV_TENSOR_LIST) return KV_OK;
    const int n = x->in->args[0].v.tensors.n;
    if (n != x->out->n)
        return kv_error(KV_ERR_INTERNAL, "%s: exact golden: %d outputs for a list of %d", x->name, x->out->n, n);
    kv_case_inputs *fin = calloc(1, sizeof *fin);
    if (fin == NULL) return kv_error(KV_ERR_OOM, "%s: exact golden: out of host memory", x->name);
    kv_status st = KV_OK;
    for (int i = 0; i < n && st == KV_OK; i++) {
        const kv_dtype dt = x->out->t[i]->dtype;
        if (kv_dtype_is_floating(dt) || kv_dtype_is_complex(dt)) st = exact_foreach_element(x, elem_op, i, fin);
    }
    free(fin);
    return st;
}
