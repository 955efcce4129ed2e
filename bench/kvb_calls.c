/* Per-call cost of every way into a kernel, on 1-element f32 tensors so
 * the kernel's own work is negligible: the direct call of the accel
 * target's kernel (the floor), kv_redispatch, kv_call, the typed API, the
 * accel fast and slow paths, each with an allocated output (add.Tensor)
 * and with a preallocated one (add_.Tensor, in place), and the allocator
 * alone. */
#include <stdio.h>
#include <stdlib.h>

#include "kv/kv.h"
#include "kvb.h"

typedef struct call_ctx {
    const kv_op *op;
    kv_kernel_fn fn;
    kv_key target;
    kv_tensor *a, *b; /* on the target (plain tensors) or accel */
} call_ctx;

static void push_args(kv_stack *s, kv_ivalue *slots, const call_ctx *c) {
    *s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(s, c->a);
    kv_push_tensor(s, c->b);
    kv_push_scalar(s, kv_scalar_int(1));
}

static void r_direct(void *p) {
    const call_ctx *c = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s;
    push_args(&s, slots, c);
    if (c->fn(c->op, kv_keyset_of(c->target), &s) == KV_OK) kv_stack_clear_returns(&s);
}

static void r_redispatch(void *p) {
    const call_ctx *c = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s;
    push_args(&s, slots, c);
    if (kv_redispatch(c->op, kv_keyset_of(c->target), &s) == KV_OK) kv_stack_clear_returns(&s);
}

static void r_call(void *p) {
    const call_ctx *c = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s;
    push_args(&s, slots, c);
    if (kv_call(c->op, &s) == KV_OK) kv_stack_clear_returns(&s);
}

static void r_typed_add(void *p) {
    const call_ctx *c = p;
    kv_tensor_release(kv_add(c->a, c->b, kv_scalar_int(1)));
}

static void r_typed_add_(void *p) {
    const call_ctx *c = p;
    kv_add_(c->a, c->b, kv_scalar_int(1));
}

static void slow_enter(void *p) {
    (void)p;
    kv_accel_redispatch_set_enabled(false);
}

static void slow_leave(void *p) {
    (void)p;
    kv_accel_redispatch_set_enabled(true);
}

static void r_empty(void *p) {
    (void)p;
    const int64_t one = 1;
    kv_tensor_release(kv_tensor_empty(&one, 1, KV_F32, KV_DEVICE_CPU0));
}

static void r_allocator(void *p) {
    kv_allocator *a = p;
    void *q = kv_allocator_alloc(a, 4);
    kv_allocator_free(a, q, 4);
}

static void r_malloc(void *p) {
    (void)p;
    void *q = malloc(64);
    kvb_sink += (double)(q != NULL);
    free(q);
}

enum { C_DIRECT, C_REDISPATCH, C_CALL, C_TYPED, C_FAST, C_SLOW, C_PER_OP };

/* Ratio of medians, and of minima (what an undisturbed round gives: on
 * a machine shared with other jobs the minima move less). */
static void ratio_of(const char *what, const kvb_case *num, const kvb_case *den, const char *goal) {
    const double m = kvb_median(den) > 0 ? kvb_median(num) / kvb_median(den) : 0.0;
    const double b = kvb_min(den) > 0 ? kvb_min(num) / kvb_min(den) : 0.0;
    printf("  %-60s %6.2f %6.2f   %s\n", what, m, b, goal);
}

void kvb_calls_section(int rounds, bool quick) {
    const kv_key target = kv_accel_target();
    const int64_t one = 1;
    kv_tensor *ta = kv_tensor_empty(&one, 1, KV_F32, KV_DEVICE_CPU0), *tb = kv_tensor_empty(&one, 1, KV_F32, KV_DEVICE_CPU0);
    if (ta == NULL || tb == NULL || target != KV_KEY_CPU) {
        printf("== per-call: skipped (%s)\n", target != KV_KEY_CPU ? "the accel target is not CPU" : kv_last_error_message());
        return;
    }
    *(float *)kv_tensor_data(ta) = 1.0f;
    *(float *)kv_tensor_data(tb) = 0.0f; /* in place a += b keeps a's value */
    kv_tensor *xa = kv_accel_to(ta), *xb = kv_accel_to(tb);
    const kv_op *add = kv_op_find("add.Tensor"), *add_ = kv_op_find("add_.Tensor");
    call_ctx ctx[2][2]; /* [op][plain, accel] */
    const kv_op *ops[2] = { add, add_ };
    for (int o = 0; o < 2; o++) {
        ctx[o][0] = (call_ctx){ ops[o], kv_op_entry_fn(ops[o], target), target, ta, tb };
        ctx[o][1] = (call_ctx){ ops[o], NULL, target, xa, xb };
    }
    kvb_case cs[2 * C_PER_OP + 3];
    const char *names[2][C_PER_OP] = {
        { "direct call of the target's add.Tensor kernel", "kv_redispatch(add.Tensor, {target})", "kv_call(add.Tensor)",
          "typed kv_add", "accel fast path (kv_add on accel tensors)", "accel slow path (fast path off)" },
        { "direct call of the target's add_.Tensor kernel", "kv_redispatch(add_.Tensor, {target})",
          "kv_call(add_.Tensor)", "typed kv_add_", "accel fast path (kv_add_ on accel tensors)",
          "accel slow path (fast path off)" },
    };
    for (int o = 0; o < 2; o++) {
        kvb_case *c = &cs[o * C_PER_OP];
        void (*typed)(void *) = o == 0 ? r_typed_add : r_typed_add_;
        c[C_DIRECT] = (kvb_case){ .name = names[o][C_DIRECT], .run = r_direct, .ctx = &ctx[o][0] };
        c[C_REDISPATCH] = (kvb_case){ .name = names[o][C_REDISPATCH], .run = r_redispatch, .ctx = &ctx[o][0] };
        c[C_CALL] = (kvb_case){ .name = names[o][C_CALL], .run = r_call, .ctx = &ctx[o][0] };
        c[C_TYPED] = (kvb_case){ .name = names[o][C_TYPED], .run = typed, .ctx = &ctx[o][0] };
        c[C_FAST] = (kvb_case){ .name = names[o][C_FAST], .run = typed, .ctx = &ctx[o][1] };
        c[C_SLOW] = (kvb_case){ .name = names[o][C_SLOW], .run = typed, .ctx = &ctx[o][1], .enter = slow_enter,
                                .leave = slow_leave };
    }
    kvb_case *al = &cs[2 * C_PER_OP];
    al[0] = (kvb_case){ .name = "kv_tensor_empty([1], f32) + release", .run = r_empty };
    al[1] = (kvb_case){ .name = "kv_allocator_alloc + free, 4 bytes (CPU)", .run = r_allocator,
                        .ctx = kv_allocator_for(KV_DEVICE_CPU) };
    al[2] = (kvb_case){ .name = "libc malloc + free, 64 bytes", .run = r_malloc };
    const int n = 2 * C_PER_OP + 3;
    kvb_run(cs, n, rounds, quick ? 5.0 : 20.0);
    printf("\n== per call, 1-element f32, accel target %s (median of %d interleaved rounds)\n", kv_accel_target_name(),
           rounds);
    printf("  -- with output allocation: add.Tensor\n");
    kvb_print_ns_rows(cs, C_PER_OP);
    printf("  -- preallocated output: add_.Tensor (in place)\n");
    kvb_print_ns_rows(cs + C_PER_OP, C_PER_OP);
    printf("  -- the allocator alone\n");
    kvb_print_ns_rows(al, 3);
    printf("\n== ratios (lower is faster)%52s %6s\n", "median", "min");
    for (int o = 0; o < 2; o++) {
        const kvb_case *c = &cs[o * C_PER_OP];
        const char *tag = o == 0 ? "add (allocating)" : "add_ (preallocated)";
        char buf[96];
        snprintf(buf, sizeof buf, "%s: accel fast path / direct target call", tag);
        ratio_of(buf, &c[C_FAST], &c[C_DIRECT], "goal <= 1.15");
        snprintf(buf, sizeof buf, "%s: accel fast path / accel slow path", tag);
        ratio_of(buf, &c[C_FAST], &c[C_SLOW], "goal <= 0.60");
        snprintf(buf, sizeof buf, "%s: accel slow path / direct target call", tag);
        ratio_of(buf, &c[C_SLOW], &c[C_DIRECT], "");
        snprintf(buf, sizeof buf, "%s: typed API / direct call (the floor)", tag);
        ratio_of(buf, &c[C_TYPED], &c[C_DIRECT], "");
        snprintf(buf, sizeof buf, "%s: kv_redispatch / direct call", tag);
        ratio_of(buf, &c[C_REDISPATCH], &c[C_DIRECT], "");
    }
    ratio_of("kv_tensor_empty + release / malloc + free", &al[0], &al[2], "");
    kv_tensor_release(xa);
    kv_tensor_release(xb);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}
