/* The fastpath check (check_fastpath.c): what the driver, kvrun and the
 * tests need beyond the check table row. Private to src/runner and tests. */
#ifndef KV_RUNNER_CHECK_FASTPATH_H
#define KV_RUNNER_CHECK_FASTPATH_H

#include <stdbool.h>

#include "kv/accel.h"

/* Gate sets (kvrun --gate=): bit 1u << gate; 0 means both. */
#define KV_FASTPATH_GATE_BIT(g) (1u << (unsigned)(g))
#define KV_FASTPATH_GATES_BOTH (KV_FASTPATH_GATE_BIT(KV_ACCEL_GATE_SEED) | KV_FASTPATH_GATE_BIT(KV_ACCEL_GATE_EXACT))

/* "seed", "exact" or "both"; 0 on success, -1 if unknown. */
int kv_fastpath_gates_parse(const char *text, unsigned *out);
/* "seed", "exact", "both" (0 counts as both). */
const char *kv_fastpath_gates_name(unsigned gates);

/* The gates the check runs under in this process (and the workers it
 * forks): kvrun --gate= sets it through kv_driver_options before the
 * cases run. Default both. */
void kv_check_fastpath_set_gates(unsigned gates);
unsigned kv_check_fastpath_gates(void);

/* TEST ONLY: with `on` true the check's "everything on" runs keep the
 * kill switch set too, so no fast path can fire: tests/test_fastpath_check.c
 * uses it to prove that a plain case then fails with "fast path never
 * fired". Process wide; never set outside tests. */
void kv_check_fastpath_kill_all_for_tests(bool on);
/* Whether it is on: the program cases' fastpath rows honour it too
 * (check_program.c). */
bool kv_check_fastpath_killed_for_tests(void);

#endif
