/* cat's tensor list, boxed in one pass.
 *
 * The pass makes every element's alias and, next to the list the slow
 * path gets, the list the fast path gets: without the legacy empty inputs
 * (1-D, size 0), which cat skips in every shape check. Dropping them must
 * not change the answer, so they go only when the rest promote to the same
 * dtype (an empty f64 next to f32 tensors makes the result f64: such a
 * list stays whole), and a list that would become empty stays whole too,
 * since an empty list is an error and a list of empties is a [0] result.
 * The slow path always gets the list as the caller passed it (autograd,
 * Trace and the lazy fallbacks see every input). */
#include "boxing/boxing_internal.h"

#include <stdlib.h>

static bool legacy_empty(const kv_tensor *t) { return t->ndim == 1 && t->sizes[0] == 0; }

kv_status kv_accel_box_cat_list(kv_accel_box *b, int slot) {
    if (!kv_accel_special_enabled(KV_ACCEL_SPECIAL_CAT)) return kv_accel_box_list(b, slot);
    kv_status st = kv_accel_box_list(b, slot);
    if (st != KV_OK || b->slots[slot].tag != KV_IV_TENSOR_LIST) return st;
    kv_tensor_list boxed = b->slots[slot].v.tensors;
    int keep = 0;
    for (int e = 0; e < boxed.n; e++) keep += !legacy_empty(boxed.items[e]);
    if (keep == boxed.n || keep == 0) return KV_OK;
    kv_tensor **items = keep <= KV_ACCEL_BOX_INLINE ? b->compact_inline : malloc((size_t)keep * sizeof *items);
    if (items == NULL)
        return kv_accel_box_fail(b, kv_error(KV_ERR_OOM, "cat: out of host memory boxing the tensor list"));
    int n = 0;
    for (int e = 0; e < boxed.n; e++)
        if (!legacy_empty(boxed.items[e])) items[n++] = boxed.items[e];
    const kv_dtype all = kv_result_type((const kv_tensor *const *)boxed.items, boxed.n, NULL, 0);
    const kv_dtype kept = kv_result_type((const kv_tensor *const *)items, n, NULL, 0);
    if (kept != all) {
        /* An empty input decides the result dtype: the list stays whole. */
        if (items != b->compact_inline) free(items);
        return KV_OK;
    }
    b->compact_slot = slot;
    b->compact_items = items;
    b->compact_n = n;
    return KV_OK;
}
