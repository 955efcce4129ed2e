/* kvbench: `ninja bench` builds and runs it. Prints, in one run, the
 * machine's limits, the per-call cost of every path into a kernel and the
 * throughput of the big kernels as fractions of those limits.
 *
 *   build/bench/kvbench [--quick] [--rounds=N]
 *
 * Timings live here, never in unit tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kvb.h"

int main(int argc, char **argv) {
    bool quick = false;
    int rounds = 9;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
            rounds = 3;
        } else if (strncmp(argv[i], "--rounds=", 9) == 0 && atoi(argv[i] + 9) > 0) {
            rounds = atoi(argv[i] + 9);
        } else {
            fprintf(stderr, "usage: kvbench [--quick] [--rounds=N (1..%d)]\n", KVB_MAX_ROUNDS);
            return 2;
        }
    }
    if (rounds > KVB_MAX_ROUNDS) rounds = KVB_MAX_ROUNDS;
    if (kv_init() != KV_OK) {
        fprintf(stderr, "kvbench: %s\n", kv_last_error_message());
        return 1;
    }
    kvb_print_loadavg("before");
    const kvb_limits lim = kvb_measure_limits(quick ? 3 : 5);
    kvb_calls_section(rounds, quick);
    kvb_throughput_section(&lim, quick ? 3 : 5, quick);
    kvb_limits_release();
    kvb_print_loadavg("after");
    return 0;
}
