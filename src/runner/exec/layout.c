/* Placing a logical tensor in a case layout on a device
 * (runner/exec/inputs.h): the layouts, the host bounce for memory the host
 * cannot address, and accel, which is its target's memory re-tagged. */
#include "runner/exec/inputs.h"

#include <string.h>

#include "kv/accel.h"
#include "kv/backend.h"

/* Advances a row-major multi-index over sizes; false after the last. */
static bool inputs_next_index(int64_t *idx, const int64_t *sizes, int nd) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < sizes[d]) return true;
        idx[d] = 0;
    }
    return false;
}

kv_tensor *kv_layout_place(const kv_tensor *logical, kv_layout layout, kv_device device) {
    if (logical == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "layout: argument 'logical': NULL");
        return NULL;
    }
    if (device.type == KV_DEVICE_ACCEL) return kv_layout_place_accel(logical, layout);
    /* Every device but the host's: place it on the host, then move the
     * whole storage, gaps included, with the backend's own copy
     * (kv/backend.h). Memory the host could address (a plugin's malloc)
     * goes the same way, so the copy operations are all a backend is
     * asked for to get its inputs (docs/bringup.md). */
    if (device.type != KV_DEVICE_CPU) {
        kv_tensor *host = kv_layout_place(logical, layout, KV_DEVICE_CPU0);
        if (host == NULL) return NULL;
        kv_tensor *moved = kv_backend_copy_to_device(host, device);
        kv_tensor_release(host);
        return moved;
    }
    const int nd = logical->ndim;
    const int64_t *sizes = logical->sizes;
    const kv_dtype dt = logical->dtype;
    int64_t strides[KV_MAX_DIMS], phys[KV_MAX_DIMS];
    kv_tensor *out = NULL;
    kv_layout eff = layout;
    kv_shape shape = { .ndim = nd };
    memcpy(shape.sizes, sizes, sizeof(int64_t) * (size_t)nd);
    const int64_t window_step = kv_layout_window_step(&shape);
    if ((layout == KV_LAYOUT_TRANSPOSED && nd < 2) || (layout == KV_LAYOUT_STRIDED && nd < 1) ||
        (layout == KV_LAYOUT_BROADCAST && nd < 1) || (layout == KV_LAYOUT_WINDOW && window_step == 0))
        eff = KV_LAYOUT_CONTIGUOUS;
    switch (eff) {
    case KV_LAYOUT_CONTIGUOUS: out = kv_tensor_empty(sizes, nd, dt, device); break;
    case KV_LAYOUT_TRANSPOSED: {
        memcpy(phys, sizes, sizeof(int64_t) * (size_t)nd);
        phys[nd - 2] = sizes[nd - 1];
        phys[nd - 1] = sizes[nd - 2];
        kv_contiguous_strides(phys, nd, strides);
        const int64_t tmp = strides[nd - 2];
        strides[nd - 2] = strides[nd - 1];
        strides[nd - 1] = tmp;
        out = kv_tensor_empty_strided(sizes, strides, nd, dt, device);
        break;
    }
    case KV_LAYOUT_STRIDED: {
        /* The even elements of a storage twice as long in the last dim; its
         * odd ones are the gaps, whole, so `--out=@N.i` can view them. */
        memcpy(phys, sizes, sizeof(int64_t) * (size_t)nd);
        phys[nd - 1] = 2 * sizes[nd - 1];
        kv_contiguous_strides(phys, nd, strides);
        strides[nd - 1] = 2;
        kv_tensor *base = kv_tensor_empty(phys, nd, dt, device);
        if (base == NULL) return NULL;
        out = kv_tensor_view(base, sizes, strides, nd, 0);
        kv_tensor_release(base);
        break;
    }
    case KV_LAYOUT_OFFSET: {
        const int64_t numel = kv_tensor_numel(logical);
        const int64_t n = numel + KV_LAYOUT_OFFSET_ELEMS;
        kv_tensor *base = kv_tensor_empty(&n, 1, dt, device);
        if (base == NULL) return NULL;
        out = kv_tensor_view(base, sizes, NULL, nd, KV_LAYOUT_OFFSET_ELEMS);
        kv_tensor_release(base);
        break;
    }
    case KV_LAYOUT_BROADCAST: {
        memcpy(phys, sizes, sizeof(int64_t) * (size_t)nd);
        phys[0] = 1;
        kv_tensor *base = kv_tensor_empty(phys, nd, dt, device);
        if (base == NULL) return NULL;
        kv_contiguous_strides(phys, nd, strides);
        strides[0] = 0;
        out = kv_tensor_view(base, sizes, strides, nd, 0);
        kv_tensor_release(base);
        break;
    }
    case KV_LAYOUT_WINDOW: {
        /* Rows of `row` elements starting window_step apart in one short
         * storage: row i's tail is row i + 1's head. */
        const int64_t row = kv_contiguous_strides(sizes, nd, strides) / sizes[0];
        const int64_t n = (sizes[0] - 1) * window_step + row;
        strides[0] = window_step;
        kv_tensor *base = kv_tensor_empty(&n, 1, dt, device);
        if (base == NULL) return NULL;
        out = kv_tensor_view(base, sizes, strides, nd, 0);
        kv_tensor_release(base);
        break;
    }
    }
    if (out == NULL) return NULL;
    if (kv_tensor_data(out) == NULL) {
        kv_tensor_release(out);
        kv_error(KV_ERR_DEVICE, "inputs: device %s:%d: memory is not host-addressable and no backend copy exists yet",
                 kv_device_type_name(device.type), device.index);
        return NULL;
    }
    memset(out->storage->data, KV_LAYOUT_GAP_BYTE, out->storage->nbytes);
    if (kv_tensor_numel(out) == 0) return out;

    /* b copies slice 0 only: the other slices alias it. w copies every
     * element: the shared ones twice, with equal values (the fill makes
     * them so, runner/exec/fill.h). */
    int64_t walk[KV_MAX_DIMS];
    memcpy(walk, sizes, sizeof(int64_t) * (size_t)nd);
    if (eff == KV_LAYOUT_BROADCAST) walk[0] = 1;
    const size_t item = kv_dtype_size(dt);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    do {
        const void *src = kv_tensor_element(logical, idx);
        void *dst = kv_tensor_element(out, idx);
        if (src == NULL || dst == NULL) {
            kv_tensor_release(out);
            return NULL;
        }
        memcpy(dst, src, item);
    } while (inputs_next_index(idx, walk, nd));
    return out;
}

/* Accel tensors are the target's memory tagged Accel + AccelBoxing: a
 * tensor merely allocated on the accel device would skip the boxing layer
 * (runner/exec/inputs_accel.c says why that matters). */
kv_tensor *kv_layout_place_accel(const kv_tensor *logical, kv_layout layout) {
    const kv_key target = kv_accel_target();
    if (target == KV_KEY_NONE) {
        kv_error(KV_ERR_DEVICE, "inputs on accel: the accel device has no target");
        return NULL;
    }
    kv_tensor *t = kv_layout_place(logical, layout, (kv_device){ (kv_device_type)target, 0 });
    if (t == NULL) return NULL;
    kv_tensor *a = kv_accel_to(t);
    kv_tensor_release(t);
    return a;
}
