/* kvcalls: N calls of one path into add / add_ on 1-element f32 tensors,
 * for counting instructions per call under Callgrind (bench/ir.sh), which
 * repeats where wall-clock timing on a shared machine does not.
 *
 *   build/bench/kvcalls PATH OP N
 *     PATH  D  direct call of the CPU kernel (the accel target's)
 *           T  typed API on CPU tensors (kv_add / kv_add_)
 *           F  typed API on accel tensors, fast path on
 *           S  typed API on accel tensors, fast paths off (slow path)
 *     OP    a  add.Tensor (allocates its output)   i  add_.Tensor (in place)
 *     N     calls after one untimed first call (tuning, first touch) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"

int main(int argc, char **argv) {
    if (argc != 4 || strchr("DTFS", argv[1][0]) == NULL || strchr("ai", argv[2][0]) == NULL) {
        fprintf(stderr, "usage: kvcalls D|T|F|S a|i N\n");
        return 2;
    }
    if (kv_init() != KV_OK || kv_accel_target() != KV_KEY_CPU) {
        fprintf(stderr, "kvcalls: needs the accel target to be CPU (%s)\n", kv_last_error_message());
        return 1;
    }
    const char path = argv[1][0];
    const bool inplace = argv[2][0] == 'i';
    const long n = atol(argv[3]);
    const int64_t one = 1;
    kv_tensor *a = kv_tensor_empty(&one, 1, KV_F32, KV_DEVICE_CPU0), *b = kv_tensor_empty(&one, 1, KV_F32, KV_DEVICE_CPU0);
    *(float *)kv_tensor_data(a) = 1.0f;
    *(float *)kv_tensor_data(b) = 0.0f;
    kv_tensor *x = a, *y = b;
    if (path == 'F' || path == 'S') {
        x = kv_accel_to(a);
        y = kv_accel_to(b);
    }
    if (path == 'S') kv_accel_redispatch_set_enabled(false);
    const kv_op *op = kv_op_find(inplace ? "add_.Tensor" : "add.Tensor");
    const kv_kernel_fn fn = kv_op_entry_fn(op, KV_KEY_CPU);
    for (long i = -1; i < n; i++) {
        if (path == 'D') {
            kv_ivalue slots[KV_STACK_MAX];
            kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
            kv_push_tensor(&s, x);
            kv_push_tensor(&s, y);
            kv_push_scalar(&s, kv_scalar_int(1));
            if (fn(op, kv_keyset_of(KV_KEY_CPU), &s) == KV_OK) kv_stack_clear_returns(&s);
        } else if (inplace) {
            kv_add_(x, y, kv_scalar_int(1));
        } else {
            kv_tensor_release(kv_add(x, y, kv_scalar_int(1)));
        }
    }
    if (x != a) kv_tensor_release(x);
    if (y != b) kv_tensor_release(y);
    kv_tensor_release(a);
    kv_tensor_release(b);
    return 0;
}
