/* The ops the accel device registers by hand (src/boxing/metadata_ops.c,
 * src/boxing/to_copy.c) instead of through kernels/accel.conf. One list
 * for both sides: kvgen rejects an accel.conf line naming one of them, and
 * the runtime registers exactly these. Plain C, no libkv types: kvgen
 * includes it before any generated header exists.
 *
 * X(full_name, is_metadata): the metadata ops make accel views directly;
 * _to_copy has its own fast path. */
#ifndef KV_BOXING_HAND_OPS_H
#define KV_BOXING_HAND_OPS_H

#define KV_ACCEL_HAND_OPS(X) \
    X("_to_copy", 0)         \
    X("_unsafe_view", 1)     \
    X("as_strided", 1)       \
    X("detach", 1)           \
    X("expand", 1)           \
    X("permute", 1)          \
    X("select.int", 1)       \
    X("slice.Tensor", 1)     \
    X("squeeze", 1)          \
    X("squeeze.dim", 1)      \
    X("transpose.int", 1)    \
    X("unfold", 1)           \
    X("unsqueeze", 1)        \
    X("view", 1)

#endif
