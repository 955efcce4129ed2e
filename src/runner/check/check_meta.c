/* Output metadata against the reference (runner/check/check_meta.h). */
#include "runner/check/check_meta.h"

#include <stdio.h>
#include <string.h>

#include "kv/tune.h"

/* The storage of input k: tensors first, then tensor-list items. */
static const kv_storage *meta_input_storage(const kv_case_inputs *in, int k) {
    if (k < in->ntensors) return in->tensors[k] ? in->tensors[k]->storage : NULL;
    k -= in->ntensors;
    return k < KV_CASE_MAX_INPUTS && in->list_items[k] ? in->list_items[k]->storage : NULL;
}

static int meta_input_count(void) { return 2 * KV_CASE_MAX_INPUTS; }

static int meta_alias_of(const kv_case_inputs *in, const kv_tensor *t) {
    for (int k = 0; k < meta_input_count(); k++) {
        const kv_storage *s = meta_input_storage(in, k);
        if (s != NULL && s == t->storage) return k;
    }
    return -1;
}

void kv_meta_expect_run(const kv_check_ctx *ctx, kv_meta_expect *m) {
    memset(m, 0, sizeof *m);
    kv_case_inputs in;
    if (kv_case_inputs_make(ctx->c, ctx->op, KV_DEVICE_CPU0, false, &in) != KV_OK) return;
    m->inputs_contiguous = true;
    m->strides_exact = strcmp(kv_op_name(ctx->op), "clone") == 0 || strcmp(kv_op_name(ctx->op), "_to_copy") == 0;
    for (int k = 0; k < meta_input_count(); k++) {
        const kv_tensor *t = k < in.ntensors ? in.tensors[k]
                             : k - in.ntensors < KV_CASE_MAX_INPUTS ? in.list_items[k - in.ntensors]
                                                                    : NULL;
        if (t != NULL && !kv_tensor_is_contiguous(t)) m->inputs_contiguous = false;
    }
    /* The reference itself, not whichever CPU variant the tuner picks. */
    const bool pinned = kv_tune_is_dispatching(ctx->op, KV_KEY_CPU) && kv_tune_pin(ctx->op, KV_KEY_CPU, "ref") == KV_OK;
    kv_case_outputs out;
    const kv_status st = kv_case_invoke(ctx->op, &in, kv_keyset_of(KV_KEY_CPU), &out);
    if (pinned) kv_tune_pin(NULL, KV_KEY_CPU, NULL);
    if (st == KV_OK) {
        m->valid = true;
        m->n = out.n;
        for (int i = 0; i < out.n; i++) {
            const kv_tensor *t = out.t[i];
            kv_meta_output *o = &m->o[i];
            o->ndim = t->ndim;
            memcpy(o->sizes, t->sizes, sizeof o->sizes);
            memcpy(o->strides, t->strides, sizeof o->strides);
            o->offset = t->offset;
            o->dtype = t->dtype;
            o->moved = t->device.type != KV_DEVICE_CPU;
            o->alias = meta_alias_of(&in, t);
            o->contiguous = kv_tensor_is_contiguous(t);
        }
        kv_case_outputs_free(&out);
    }
    kv_case_inputs_free(&in);
}

static void meta_dims(const int64_t *d, int n, char *buf, int cap) { kv_shape_format(d, n, buf, cap); }

/* Whether t's strides or storage offset differ from the reference's
 * (sizes are compared before any caller asks). */
static bool layout_differs(const kv_tensor *t, const kv_meta_output *o) {
    return memcmp(t->strides, o->strides, sizeof(int64_t) * (size_t)t->ndim) != 0 || t->offset != o->offset;
}

bool kv_meta_check(const kv_meta_expect *m, const kv_case_inputs *in, const kv_case_outputs *out, kv_device dev,
                   char *msg, int cap) {
    if (!m->valid || out->n != m->n) return true; /* counts are the caller's check */
    char a[KV_MAX_DIMS * 24], b[KV_MAX_DIMS * 24];
    for (int i = 0; i < out->n; i++) {
        const kv_tensor *t = out->t[i];
        const kv_meta_output *o = &m->o[i];
        if (t->dtype != o->dtype) {
            snprintf(msg, (size_t)cap, "output %d: dtype %s, the reference's is %s", i, kv_dtype_name(t->dtype),
                     kv_dtype_name(o->dtype));
            return false;
        }
        if (t->ndim != o->ndim || memcmp(t->sizes, o->sizes, sizeof(int64_t) * (size_t)t->ndim) != 0) {
            meta_dims(t->sizes, t->ndim, a, (int)sizeof a);
            meta_dims(o->sizes, o->ndim, b, (int)sizeof b);
            snprintf(msg, (size_t)cap, "output %d: sizes %s, the reference's are %s", i, a, b);
            return false;
        }
        /* The whole device, index included: a tensor that says sim:1 over
         * sim:0's memory sends every later op to the wrong device. (Accel
         * memory is its target's, so an accel tensor may sit on it.) */
        if (t->storage != NULL && t->device.type != KV_DEVICE_ACCEL && t->storage->device.type != KV_DEVICE_ACCEL &&
            !kv_device_equal(t->storage->device, t->device)) {
            snprintf(msg, (size_t)cap, "output %d: says device %s:%d, but its memory is %s:%d's", i,
                     kv_device_type_name(t->device.type), t->device.index,
                     kv_device_type_name(t->storage->device.type), t->storage->device.index);
            return false;
        }
        if (!o->moved && (t->device.type != dev.type || t->device.index != dev.index)) {
            snprintf(msg, (size_t)cap, "output %d: on device %s:%d, expected %s:%d (where its inputs are)", i,
                     kv_device_type_name(t->device.type), t->device.index, kv_device_type_name(dev.type),
                     dev.index);
            return false;
        }
        const int alias = meta_alias_of(in, t);
        if (o->alias >= 0 && alias != o->alias) {
            if (alias < 0)
                snprintf(msg, (size_t)cap,
                         "output %d: a new tensor, but the reference returns it over input %d's storage (a view "
                         "or the written argument must alias its input)",
                         i, o->alias);
            else
                snprintf(msg, (size_t)cap, "output %d: over input %d's storage, the reference's is over input %d's", i,
                         alias, o->alias);
            return false;
        }
        if (o->alias < 0 && alias >= 0) {
            snprintf(msg, (size_t)cap,
                     "output %d: shares storage with input %d, but the reference returns a new tensor (writing "
                     "to it would change the input)",
                     i, alias);
            return false;
        }
        if (o->alias >= 0 && layout_differs(t, o)) {
            meta_dims(t->strides, t->ndim, a, (int)sizeof a);
            meta_dims(o->strides, o->ndim, b, (int)sizeof b);
            snprintf(msg, (size_t)cap,
                     "output %d: a view with strides %s and storage offset %lld, the reference's has strides %s "
                     "and offset %lld",
                     i, a, (long long)t->offset, b, (long long)o->offset);
            return false;
        }
        if (o->alias < 0 && m->strides_exact && layout_differs(t, o)) {
            meta_dims(t->strides, t->ndim, a, (int)sizeof a);
            meta_dims(o->strides, o->ndim, b, (int)sizeof b);
            snprintf(msg, (size_t)cap,
                     "output %d: strides %s and storage offset %lld; the reference's are %s and %lld "
                     "(memory_format=preserve keeps the input's layout)",
                     i, a, (long long)t->offset, b, (long long)o->offset);
            return false;
        }
        if (o->alias < 0 && m->inputs_contiguous && o->contiguous &&
            (!kv_tensor_is_contiguous(t) || t->offset != o->offset)) {
            meta_dims(t->strides, t->ndim, a, (int)sizeof a);
            meta_dims(o->strides, o->ndim, b, (int)sizeof b);
            snprintf(msg, (size_t)cap,
                     "output %d: strides %s and storage offset %lld from contiguous inputs; the reference's "
                     "output is contiguous (strides %s, offset %lld)",
                     i, a, (long long)t->offset, b, (long long)o->offset);
            return false;
        }
    }
    return true;
}
