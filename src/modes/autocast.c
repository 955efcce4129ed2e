/* Autocast mode: the TLS mode, the op table and the kernels at
 * KV_KEY_AUTOCAST (one per policy). */
#include "kv/autocast.h"

#include <stdlib.h>
#include <string.h>

#include "kv/dispatch.h"
#include "kv/ops.h"
#include "kv/tensor.h"
#include "modes/mode_tls.h"

/* The op lists: ONE table. An op not here is a fallthrough at Autocast. */
static const struct {
    const char *op;
    kv_autocast_policy policy;
} g_table[] = {
    { "mm", KV_AUTOCAST_LOWER },
    { "bmm", KV_AUTOCAST_LOWER },
    { "addmm", KV_AUTOCAST_LOWER },
    { "_softmax", KV_AUTOCAST_FP32 },
    { "_log_softmax", KV_AUTOCAST_FP32 },
    { "native_layer_norm", KV_AUTOCAST_FP32 },
    { "native_group_norm", KV_AUTOCAST_FP32 },
    { "exp", KV_AUTOCAST_FP32 },
    { "log", KV_AUTOCAST_FP32 },
    { "sum.dim_IntList", KV_AUTOCAST_FP32 },
    { "mean.dim", KV_AUTOCAST_FP32 },
    { "pow.Tensor_Scalar", KV_AUTOCAST_FP32 },
    { "cat", KV_AUTOCAST_PROMOTE },
    { "stack", KV_AUTOCAST_PROMOTE },
    { "where.self", KV_AUTOCAST_PROMOTE },
};
#define AC_NROWS ((int)(sizeof g_table / sizeof g_table[0]))

/* ---- per-thread state ---- */

static _Thread_local kv_dtype t_dtypes[KV_AUTOCAST_MAX_DEPTH];
static _Thread_local int t_depth;
static _Thread_local kv_keyset t_included_before;
static _Thread_local kv_autocast_counters t_counters;

kv_status kv_autocast_enter(kv_dtype dtype) {
    if (dtype != KV_F16 && dtype != KV_BF16)
        return kv_error(KV_ERR_DTYPE, "kv_autocast_enter: argument 'dtype': %s is not f16 or bf16",
                        (unsigned)dtype < (unsigned)KV_DTYPE_COUNT ? kv_dtype_name(dtype) : "an unknown dtype");
    if (t_depth == KV_AUTOCAST_MAX_DEPTH)
        return kv_error(KV_ERR_INVALID_ARG, "kv_autocast_enter: autocast is nested too deeply (%d levels)",
                        KV_AUTOCAST_MAX_DEPTH);
    if (t_depth == 0) t_included_before = kv_mode_tls_on(KV_KEY_AUTOCAST);
    t_dtypes[t_depth++] = dtype;
    return KV_OK;
}

kv_status kv_autocast_exit(void) {
    if (t_depth == 0) return kv_error(KV_ERR_INVALID_ARG, "kv_autocast_exit: autocast is not on in this thread");
    if (--t_depth == 0) kv_mode_tls_off(KV_KEY_AUTOCAST, t_included_before);
    return KV_OK;
}

bool kv_autocast_active(void) { return t_depth > 0; }
int kv_autocast_depth(void) { return t_depth; }
kv_dtype kv_autocast_dtype(void) { return t_depth > 0 ? t_dtypes[t_depth - 1] : KV_DTYPE_COUNT; }

kv_autocast_policy kv_autocast_policy_of(const char *full_name) {
    for (int i = 0; full_name != NULL && i < AC_NROWS; i++)
        if (strcmp(g_table[i].op, full_name) == 0) return g_table[i].policy;
    return KV_AUTOCAST_NONE;
}

const char *kv_autocast_policy_name(kv_autocast_policy p) {
    switch (p) {
    case KV_AUTOCAST_NONE: return "none";
    case KV_AUTOCAST_LOWER: return "lower";
    case KV_AUTOCAST_FP32: return "fp32";
    case KV_AUTOCAST_PROMOTE: return "promote";
    }
    return "?";
}

kv_autocast_counters kv_autocast_counters_get(void) { return t_counters; }
void kv_autocast_counters_reset(void) { t_counters = (kv_autocast_counters){ 0 }; }

/* ---- the kernels ---- */

static void ac_count_cast(kv_autocast_policy p) {
    t_counters.casts++;
    switch (p) {
    case KV_AUTOCAST_NONE: break;
    case KV_AUTOCAST_LOWER: t_counters.casts_lower++; break;
    case KV_AUTOCAST_FP32: t_counters.casts_fp32++; break;
    case KV_AUTOCAST_PROMOTE: t_counters.casts_promote++; break;
    }
}

static bool ac_needs_cast(kv_autocast_policy p, kv_dtype dt, kv_dtype target) {
    if (!kv_dtype_is_floating(dt) || dt == target) return false;
    switch (p) {
    case KV_AUTOCAST_NONE: return false;
    case KV_AUTOCAST_LOWER: return true;
    case KV_AUTOCAST_FP32: return dt == KV_F16 || dt == KV_BF16;
    case KV_AUTOCAST_PROMOTE: return true;
    }
    return false;
}

/* The widest floating dtype among the tensor arguments, or KV_DTYPE_COUNT
 * when none is floating. */
static kv_dtype ac_widest_floating(const kv_schema *s, const kv_stack *stack) {
    kv_dtype widest = KV_DTYPE_COUNT;
    for (int i = 0; i < s->nargs; i++) {
        if (s->args[i].type.kind != KV_TYPE_TENSOR) continue;
        const kv_ivalue *v = &stack->slots[i];
        const int n = v->tag == KV_IV_TENSOR_LIST ? v->v.tensors.n : v->tag == KV_IV_TENSOR ? 1 : 0;
        for (int e = 0; e < n; e++) {
            kv_dtype dt = v->tag == KV_IV_TENSOR_LIST ? v->v.tensors.items[e]->dtype : v->v.tensor->dtype;
            if (!kv_dtype_is_floating(dt)) continue;
            widest = widest == KV_DTYPE_COUNT ? dt : kv_promote_types(widest, dt);
        }
    }
    return widest;
}

/* The casts one call made: released once the op has run. */
typedef struct ac_temps {
    kv_tensor **cast;   /* owned casts */
    int ncast, cap;
    kv_tensor **lists[KV_SCHEMA_MAX_ARGS]; /* replacement Tensor[] arrays */
    int nlists;
} ac_temps;

static void ac_temps_free(ac_temps *t) {
    for (int i = 0; i < t->ncast; i++) kv_tensor_release(t->cast[i]);
    free(t->cast);
    for (int i = 0; i < t->nlists; i++) free(t->lists[i]);
}

/* A cast of `t` to `target` through the dispatcher; NULL + error. */
static kv_tensor *ac_cast(ac_temps *temps, kv_autocast_policy p, kv_tensor *t, kv_dtype target) {
    if (temps->ncast == temps->cap) {
        int cap = temps->cap ? 2 * temps->cap : 8;
        kv_tensor **grown = realloc(temps->cast, sizeof *grown * (size_t)cap);
        if (grown == NULL) {
            kv_error(KV_ERR_OOM, "autocast: out of memory");
            return NULL;
        }
        temps->cast = grown;
        temps->cap = cap;
    }
    kv_tensor *c = kv__to_copy(t, &target, NULL, NULL, NULL, false, NULL);
    if (c == NULL) return NULL;
    temps->cast[temps->ncast++] = c;
    ac_count_cast(p);
    return c;
}

/* Replaces the tensor arguments that need it by casts. */
static kv_status ac_cast_args(const kv_op *op, kv_autocast_policy p, kv_dtype target, kv_stack *stack,
                              ac_temps *temps) {
    const kv_schema *s = kv_op_schema(op);
    for (int i = 0; i < s->nargs; i++) {
        if (s->args[i].type.kind != KV_TYPE_TENSOR) continue;
        kv_ivalue *v = &stack->slots[i];
        if (v->tag == KV_IV_TENSOR) {
            if (!ac_needs_cast(p, v->v.tensor->dtype, target)) continue;
            kv_tensor *c = ac_cast(temps, p, v->v.tensor, target);
            if (c == NULL) return kv_last_error();
            v->v.tensor = c;
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            const kv_tensor_list list = v->v.tensors;
            bool any = false;
            for (int e = 0; e < list.n && !any; e++) any = ac_needs_cast(p, list.items[e]->dtype, target);
            if (!any) continue;
            kv_tensor **items = malloc(sizeof *items * (size_t)list.n);
            if (items == NULL) return kv_error(KV_ERR_OOM, "%s: autocast: out of memory", kv_op_name(op));
            temps->lists[temps->nlists++] = items;
            for (int e = 0; e < list.n; e++) {
                items[e] = list.items[e];
                if (!ac_needs_cast(p, items[e]->dtype, target)) continue;
                if ((items[e] = ac_cast(temps, p, list.items[e], target)) == NULL) return kv_last_error();
            }
            v->v.tensors = (kv_tensor_list){ items, list.n };
        }
    }
    return KV_OK;
}

static kv_status ac_run(kv_autocast_policy p, const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_keyset below = kv_keyset_below(KV_KEY_AUTOCAST);
    /* The key without the mode (included by hand): nothing to cast to. */
    if (t_depth == 0) return kv_redispatch(op, ks & below, stack);
    t_counters.calls++;
    const kv_schema *s = kv_op_schema(op);
    kv_dtype target = KV_F32;
    switch (p) {
    case KV_AUTOCAST_NONE: return kv_redispatch(op, ks & below, stack);
    case KV_AUTOCAST_LOWER: target = kv_autocast_dtype(); break;
    case KV_AUTOCAST_FP32: target = KV_F32; break;
    case KV_AUTOCAST_PROMOTE:
        target = ac_widest_floating(s, stack);
        if (target == KV_DTYPE_COUNT) return kv_redispatch(op, ks & below, stack);
        break;
    }
    if (stack->size > KV_STACK_MAX)
        return kv_error(KV_ERR_INTERNAL, "%s: autocast: %d arguments, more than KV_STACK_MAX", kv_op_name(op),
                        stack->size);
    kv_ivalue orig[KV_STACK_MAX];
    const int nargs = stack->size;
    memcpy(orig, stack->slots, sizeof orig[0] * (size_t)nargs);

    ac_temps temps = { 0 };
    kv_status st = ac_cast_args(op, p, target, stack, &temps);
    kv_keyset run_ks = ks & below;
    if (st == KV_OK && temps.ncast > 0) {
        if (p == KV_AUTOCAST_FP32) {
            const int h = kv_schema_arg_index(s, "half_to_float");
            if (h >= 0 && stack->slots[h].tag == KV_IV_BOOL) stack->slots[h].v.b = false;
        }
        /* The casts may carry other keys than the originals (a lazy bit
         * the cast materialized), so the layers below see the key set of
         * what they actually get. */
        kv_keyset recomputed;
        st = kv_call_keyset(op, stack, &recomputed);
        run_ks = recomputed & below;
    }
    if (st == KV_OK) st = kv_redispatch(op, run_ks, stack);
    if (st != KV_OK) {
        /* Nothing owned is left; put the caller's (borrowed) arguments back
         * rather than pointers to casts about to be freed. */
        memcpy(stack->slots, orig, sizeof orig[0] * (size_t)nargs);
        stack->size = nargs;
    }
    ac_temps_free(&temps);
    return st;
}

static kv_status ac_lower(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return ac_run(KV_AUTOCAST_LOWER, op, ks, stack);
}
static kv_status ac_fp32(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return ac_run(KV_AUTOCAST_FP32, op, ks, stack);
}
static kv_status ac_promote(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return ac_run(KV_AUTOCAST_PROMOTE, op, ks, stack);
}

kv_status kv_autocast_register(void) {
    kv_register_fallback_fallthrough(KV_KEY_AUTOCAST);
    for (int i = 0; i < AC_NROWS; i++) {
        kv_kernel_fn fn = NULL;
        switch (g_table[i].policy) {
        case KV_AUTOCAST_NONE: continue;
        case KV_AUTOCAST_LOWER: fn = ac_lower; break;
        case KV_AUTOCAST_FP32: fn = ac_fp32; break;
        case KV_AUTOCAST_PROMOTE: fn = ac_promote; break;
        }
        kv_status st = kv_register_kernel(g_table[i].op, KV_KEY_AUTOCAST, fn);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
