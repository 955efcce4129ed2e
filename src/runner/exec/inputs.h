/* Placing logical values into a case layout (runner/inputs.c); the rest
 * of the input API (kv_case_inputs_make/free) is in runner/check.h.
 *
 * Layouts, for a tensor of logical shape S (each holds the same logical
 * values; only sizes/strides/offset and storage differ):
 *   c  row-major contiguous;
 *   t  the last two dims swapped in memory (strides of the transposed
 *      contiguous tensor, swapped back); tensors of < 2 dims: as c;
 *   s  every other element of a buffer whose last dim is twice as wide
 *      (last stride 2); 0-dim: as c;
 *   o  contiguous at storage offset 3 (KV_LAYOUT_OFFSET_ELEMS);
 *   b  dim 0 expanded with stride 0 from a storage holding one dim-0
 *      slice; 0-dim: as c. The values must repeat along dim 0 (the fill
 *      makes them so, runner/fill.h); kv_layout_place copies slice 0.
 * Storage bytes that no element maps to (gaps of s, the offset of o) hold
 * KV_LAYOUT_GAP_BYTE, the same in every run, so a kernel that reads them
 * gives the same wrong answer every time and the memory check's input
 * snapshot covers them. */
#ifndef KV_RUNNER_INPUTS_H
#define KV_RUNNER_INPUTS_H

#include "kv/tensor.h"
#include "runner/case/case.h"

#define KV_LAYOUT_OFFSET_ELEMS 3
#define KV_LAYOUT_GAP_BYTE 0xA5

/* A new tensor on `device` with `layout` holding the logical values of
 * `logical` (any strides, host-addressable). Device memory the host
 * cannot address is filled on the host and moved with the backend's
 * copies (kv/backend.h). NULL + error on failure. */
kv_tensor *kv_layout_place(const kv_tensor *logical, kv_layout layout, kv_device device);

/* device=accel (inputs_accel.c). kv_layout_place on accel places on the
 * accel target and re-tags the result with kv_accel_to, so it carries the
 * AccelBoxing key like every accel tensor a user has (kv_tensor_empty on
 * accel gives only the Accel backend key, which would skip the boxing
 * layer). kv_case_inputs_make on accel then calls
 * kv_case_inputs_accel_device: a factory whose case leaves its Device
 * argument unset gets accel. */
kv_tensor *kv_layout_place_accel(const kv_tensor *logical, kv_layout layout);
struct kv_op;
struct kv_case_inputs;
void kv_case_inputs_accel_device(const kv_case *c, const struct kv_op *op, struct kv_case_inputs *in);

#endif
