/* A recorded copy made without dispatching an op (kv/autograd.h,
 * kv_autograd_record_copy): the runner's non-leaf of a leaf on a device
 * whose backend need not have the ops a recorded copy_ or clone runs. */
#include <string.h>

#include "kv/autograd.h"
#include "modes/autograd_internal.h"

kv_status kv_autograd_record_copy(kv_tensor *dst, kv_tensor *src) {
    if (dst == NULL || src == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "record_copy: argument '%s': NULL tensor", dst == NULL ? "dst" : "src");
    if (!kv_ag_requires_grad(src))
        return kv_error(KV_ERR_INVALID_ARG, "record_copy: argument 'src': does not require grad");
    if (kv_ag_requires_grad(dst) || dst == src)
        return kv_error(KV_ERR_INVALID_ARG, "record_copy: argument 'dst': already has autograd history");
    if (dst->dtype != src->dtype || dst->ndim != src->ndim ||
        memcmp(dst->sizes, src->sizes, sizeof(int64_t) * (size_t)src->ndim) != 0)
        return kv_error(KV_ERR_SHAPE, "record_copy: argument 'dst': dtype and sizes must be those of 'src'");
    /* The values are the source's, so the gradient passes unchanged, as
     * through clone's CloneBackward0: no op runs forward or backward. */
    kv_ag_node *node = kv_ag_node_new("CopyBackwards", kv_ag_f_identity, 1, 1);
    if (node == NULL) return kv_last_error();
    node->in_first[0] = 0;
    node->in_count[0] = 1;
    kv_ag_tmeta_of(src, &node->in_meta[0]);
    node->edges[0] = kv_ag_edge_of(src);
    node->needs[0] = true;
    kv_ag_tmeta_of(dst, &node->out_meta[0]);
    struct kv_autograd_meta *m = kv_ag_meta_ensure(dst);
    if (m == NULL) {
        kv_ag_node_release(node);
        return kv_last_error();
    }
    m->requires_grad = true;
    kv_ag_meta_set_grad_fn(m, node, 0);
    dst->keys = kv_keyset_add(dst->keys, KV_KEY_AUTOGRAD);
    kv_ag_node_release(node);
    return KV_OK;
}
