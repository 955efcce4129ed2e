/* Inputs a call may not change or release (runner/exec/input_guard.h). */
#include "runner/exec/input_guard.h"

#include <stdio.h>
#include <string.h>

#include "runner/check/check_util.h"

/* The geometry of a tensor (storage, sizes, strides, offset, dtype,
 * device), the fields a kernel must leave as it found them. The snapshot
 * and the restore both go through here; the reference count, autograd
 * and lazy state are the tensor's own and are never copied. */
static void guard_copy_geometry(kv_tensor *dst, const kv_tensor *src) {
    dst->storage = src->storage;
    dst->ndim = src->ndim;
    memcpy(dst->sizes, src->sizes, sizeof dst->sizes);
    memcpy(dst->strides, src->strides, sizeof dst->strides);
    dst->offset = src->offset;
    dst->dtype = src->dtype;
    dst->device = src->device;
}

void kv_input_guard_take(const kv_op *op, const kv_case_inputs *in, kv_input_snap *s) {
    s->n = 0;
    for (int i = 0; i < in->nargs && s->n < KV_SCHEMA_MAX_ARGS; i++) {
        if (in->args[i].tag != KV_IV_TENSOR || in->args[i].v.tensor == NULL) continue;
        kv_tensor *t = in->args[i].v.tensor;
        bool seen = false;
        for (int k = 0; k < s->n; k++) seen = seen || s->t[k] == t;
        if (seen) continue; /* mul(x, x): one snapshot, one reference */
        const int k = s->n++;
        s->t[k] = t;
        s->arg[k] = i;
        s->written[k] = kv_check_arg_is_mutated(op, i);
        /* The geometry only, field by field: the reference count is atomic
         * and read below as such. */
        kv_tensor *g = &s->geometry[k];
        memset(g, 0, sizeof *g);
        guard_copy_geometry(g, t);
        kv_tensor_retain(t);
        s->refs[k] = atomic_load(&t->refcount);
    }
}

/* "sizes [4, 5] -> [20]; strides [5, 1] -> [1]" for what differs. */
static void guard_describe(const kv_tensor *was, const kv_tensor *now, char *buf, int cap) {
    char a[KV_MAX_DIMS * 24], b[KV_MAX_DIMS * 24];
    int len = 0;
    buf[0] = '\0';
    if (was->ndim != now->ndim || memcmp(was->sizes, now->sizes, sizeof(int64_t) * (size_t)was->ndim) != 0) {
        kv_shape_format(was->sizes, was->ndim, a, (int)sizeof a);
        kv_shape_format(now->sizes, now->ndim >= 0 && now->ndim <= KV_MAX_DIMS ? now->ndim : 0, b, (int)sizeof b);
        len += snprintf(buf + len, (size_t)(cap - len), "sizes %s -> %s", a, b);
    }
    if (len < cap && memcmp(was->strides, now->strides, sizeof(int64_t) * (size_t)was->ndim) != 0) {
        kv_shape_format(was->strides, was->ndim, a, (int)sizeof a);
        kv_shape_format(now->strides, now->ndim >= 0 && now->ndim <= KV_MAX_DIMS ? now->ndim : 0, b, (int)sizeof b);
        len += snprintf(buf + len, (size_t)(cap - len), "%sstrides %s -> %s", len ? "; " : "", a, b);
    }
    if (len < cap && was->offset != now->offset)
        len += snprintf(buf + len, (size_t)(cap - len), "%sstorage offset %lld -> %lld", len ? "; " : "",
                        (long long)was->offset, (long long)now->offset);
    if (len < cap && was->dtype != now->dtype)
        len += snprintf(buf + len, (size_t)(cap - len), "%sdtype %s -> %s", len ? "; " : "", kv_dtype_name(was->dtype),
                        kv_dtype_name(now->dtype));
    if (len < cap && (was->device.type != now->device.type || was->device.index != now->device.index))
        len += snprintf(buf + len, (size_t)(cap - len), "%sdevice changed", len ? "; " : "");
    if (len < cap && was->storage != now->storage)
        snprintf(buf + len, (size_t)(cap - len), "%sits storage replaced", len ? "; " : "");
}

static bool guard_same_geometry(const kv_tensor *was, const kv_tensor *now) {
    if (was->ndim != now->ndim || was->offset != now->offset || was->dtype != now->dtype ||
        was->device.type != now->device.type || was->device.index != now->device.index || was->storage != now->storage)
        return false;
    const size_t n = sizeof(int64_t) * (size_t)was->ndim;
    return memcmp(was->sizes, now->sizes, n) == 0 && memcmp(was->strides, now->strides, n) == 0;
}


bool kv_input_guard_check(const kv_op *op, kv_keyset ks, kv_input_snap *s, char *msg, int cap) {
    const kv_schema *sch = kv_op_schema(op);
    char who[160];
    if (ks != 0) snprintf(who, sizeof who, "the %s kernel of %s", kv_op_name(op), kv_key_name(kv_keyset_highest(ks)));
    else snprintf(who, sizeof who, "the %s call", kv_op_name(op));
    bool ok = true;
    if (cap > 0) msg[0] = '\0';
    for (int k = 0; k < s->n; k++) {
        kv_tensor *t = s->t[k];
        const char *arg = sch != NULL && s->arg[k] < sch->nargs ? sch->args[s->arg[k]].name : "?";
        /* Released more than it took: give the references back before
         * anything reads the tensor again, then say so. */
        const int now = atomic_load(&t->refcount);
        if (now < s->refs[k]) {
            for (int r = now; r < s->refs[k]; r++) kv_tensor_retain(t);
            if (ok)
                snprintf(msg, (size_t)cap,
                         "%s released argument '%s' %d time%s more than it retained it (a kernel owns no reference "
                         "to its inputs: it must not release them)",
                         who, arg, s->refs[k] - now, s->refs[k] - now == 1 ? "" : "s");
            ok = false;
        }
        if (!s->written[k] && !guard_same_geometry(&s->geometry[k], t)) {
            char what[320];
            guard_describe(&s->geometry[k], t, what, (int)sizeof what);
            if (ok)
                snprintf(msg, (size_t)cap,
                         "%s changed argument '%s' in place and left it so: %s (a kernel must not change its inputs' "
                         "sizes, strides, offset, dtype, device or storage unless the schema marks them written)",
                         who, arg, what);
            guard_copy_geometry(t, &s->geometry[k]); /* put back: the caller uses it again */
            ok = false;
        }
        kv_tensor_release(t);
    }
    s->n = 0;
    return ok;
}
