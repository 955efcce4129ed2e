/* An element's ulp distance as a reader can use it. Between values of
 * opposite signs the distance counts every float between them, through
 * zero: "ulp 2157707264" says only that the sign is wrong, so that is what
 * is said. */
#include "runner/report/report_internal.h"

#include <math.h>
#include <stdio.h>

void kv_report_fmt_ulp(const kv_mismatch *m, char *buf, int cap) {
    if (m->ulps < 0) {
        snprintf(buf, (size_t)cap, "n/a");
    } else if (isfinite(m->expected) && isfinite(m->got) && m->expected != 0 && m->got != 0 &&
               signbit(m->expected) != signbit(m->got)) {
        snprintf(buf, (size_t)cap, "sign differs");
    } else {
        kv_report_fmt_double(m->ulps, buf, cap);
    }
}
