/* kvpeers: `ninja bench-peers`, optional (it needs Debian's libtorch-dev
 * and is never built by `ninja`, `ninja test` or CI). The same per-call
 * cases as kvbench, kvsuite and libtorch side by side in one process,
 * interleaved (bench/kvb_timing.c), and the ratios issue 12 states its
 * goals in: typed kv_add with output allocation against at::add, and the
 * floor under it (the direct call of the CPU kernel, which allocates the
 * output too).
 *
 *   build/bench/kvpeers [--rounds=N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kvb.h"
#include "kvpeers.h"

typedef struct kv_ctx {
    const kv_op *op;
    kv_kernel_fn fn;
    kv_tensor *a, *b;
} kv_ctx;

static void r_direct(void *p) {
    const kv_ctx *c = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, c->a);
    kv_push_tensor(&s, c->b);
    kv_push_scalar(&s, kv_scalar_int(1));
    if (c->fn(c->op, kv_keyset_of(KV_KEY_CPU), &s) == KV_OK) kv_stack_clear_returns(&s);
}

static void r_add(void *p) {
    const kv_ctx *c = p;
    kv_tensor_release(kv_add(c->a, c->b, kv_scalar_int(1)));
}

static void r_add_(void *p) {
    const kv_ctx *c = p;
    kv_add_(c->a, c->b, kv_scalar_int(1));
}

static void r_empty(void *p) {
    (void)p;
    const int64_t one = 1;
    kv_tensor_release(kv_tensor_empty(&one, 1, KV_F32, KV_DEVICE_CPU0));
}

static void ratio(const char *what, const kvb_case *num, const kvb_case *den, const char *goal) {
    const double m = kvb_median(den) > 0 ? kvb_median(num) / kvb_median(den) : 0.0;
    const double b = kvb_min(den) > 0 ? kvb_min(num) / kvb_min(den) : 0.0;
    printf("  %-56s %6.3f %6.3f   %s\n", what, m, b, goal);
}

int main(int argc, char **argv) {
    int rounds = 9;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--rounds=", 9) == 0 && atoi(argv[i] + 9) > 0) {
            rounds = atoi(argv[i] + 9);
        } else {
            fprintf(stderr, "usage: kvpeers [--rounds=N (1..%d)]\n", KVB_MAX_ROUNDS);
            return 2;
        }
    }
    if (rounds > KVB_MAX_ROUNDS) rounds = KVB_MAX_ROUNDS;
    if (kv_init() != KV_OK) {
        fprintf(stderr, "kvpeers: %s\n", kv_last_error_message());
        return 1;
    }
    void *torch = kvp_torch_setup();
    const int64_t one = 1;
    kv_ctx add = { kv_op_find("add.Tensor"), NULL, kv_tensor_empty(&one, 1, KV_F32, KV_DEVICE_CPU0),
                   kv_tensor_empty(&one, 1, KV_F32, KV_DEVICE_CPU0) };
    if (torch == NULL || add.op == NULL || add.a == NULL || add.b == NULL) {
        fprintf(stderr, "kvpeers: set-up failed (%s)\n", torch == NULL ? "libtorch" : kv_last_error_message());
        return 1;
    }
    add.fn = kv_op_entry_fn(add.op, KV_KEY_CPU);
    *(float *)kv_tensor_data(add.a) = 1.0f;
    *(float *)kv_tensor_data(add.b) = 0.0f;
    enum { DIRECT, KV_ADD, AT_ADD, KV_ADD_, AT_ADD_, KV_EMPTY, AT_EMPTY, N };
    kvb_case cs[N] = {
        [DIRECT] = { .name = "direct call of the CPU add.Tensor kernel (the floor)", .run = r_direct, .ctx = &add },
        [KV_ADD] = { .name = "typed kv_add (allocating)", .run = r_add, .ctx = &add },
        [AT_ADD] = { .name = "libtorch at::add (allocating)", .run = kvp_torch_add, .ctx = torch },
        [KV_ADD_] = { .name = "typed kv_add_ (in place)", .run = r_add_, .ctx = &add },
        [AT_ADD_] = { .name = "libtorch Tensor::add_ (in place)", .run = kvp_torch_add_, .ctx = torch },
        [KV_EMPTY] = { .name = "kv_tensor_empty([1], f32) + release", .run = r_empty },
        [AT_EMPTY] = { .name = "libtorch at::empty({1}, f32) + release", .run = kvp_torch_empty, .ctx = torch },
    };
    kvb_run(cs, N, rounds, 20.0);
    printf("== per call, 1-element f32 on the CPU, kvsuite vs %s, one thread (median of %d interleaved "
           "rounds)\n",
           kvp_torch_version(), rounds);
    kvb_print_ns_rows(cs, N);
    printf("\n== ratios (lower is faster)%46s %6s\n", "median", "min");
    ratio("typed kv_add / at::add", &cs[KV_ADD], &cs[AT_ADD], "goal <= 0.10");
    ratio("floor (direct kernel + allocation) / at::add", &cs[DIRECT], &cs[AT_ADD], "");
    ratio("typed kv_add_ / Tensor::add_", &cs[KV_ADD_], &cs[AT_ADD_], "");
    ratio("kv_tensor_empty + release / at::empty", &cs[KV_EMPTY], &cs[AT_EMPTY], "");
    kvp_torch_teardown(torch);
    kv_tensor_release(add.a);
    kv_tensor_release(add.b);
    return 0;
}
