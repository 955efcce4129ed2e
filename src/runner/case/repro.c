/* The start of every repro line (case.h). A repro line must reproduce:
 * pasted into a shell it runs the same program on the same backends with
 * the same settings, so kvrun hands over everything beyond the case
 * itself once, here, and every row's line begins with it. */
#include <stdio.h>

#include "runner/case/case.h"

static char g_prefix[KV_CASE_REPRO_MAX / 2] = "kvrun";

void kv_case_repro_set_prefix(const char *prefix) {
    snprintf(g_prefix, sizeof g_prefix, "%s", prefix && prefix[0] ? prefix : "kvrun");
}

const char *kv_case_repro_prefix(void) { return g_prefix; }
