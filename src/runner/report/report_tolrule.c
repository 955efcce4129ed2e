/* The tolerance rule in a failure's message, for report.html: the variants
 * check ends its message with "[RULE: REASON]", REASON the tolerance
 * table's rationale of the row (runner/check/tolerance.c), often 300
 * characters. results.jsonl and the console keep it whole (a row read
 * alone must say why its bound is what it is); the page names the rule on
 * each card and gives each rationale once (report_html.c). */
#include "runner/report/report_internal.h"
#include "runner/check/tolerance.h"

#include <string.h>

/* The table's rationale that `s` starts with, followed by ']'; NULL when
 * none. Rows share rationales, so the first row with it stands for all. */
static const char *reason_at(const char *s) {
    for (int i = 0; i < kv_tol_count(); i++) {
        const char *why = kv_tol_at(i)->reason;
        const size_t n = why ? strlen(why) : 0;
        if (n > 0 && strncmp(s, why, n) == 0 && s[n] == ']') return why;
    }
    return NULL;
}

const char *kv_report_tol_split(const char *message, char *rest, int restcap, char *rule, int rulecap) {
    for (const char *open = strstr(message, " ["); open != NULL; open = strstr(open + 1, " [")) {
        const char *colon = strstr(open + 2, ": ");
        if (colon == NULL) break;
        /* A rule is short and has no bracket or space ("ulp:2", "rel:4",
         * "bound"; "bitwise (+0 == -0)" has spaces but no ": "). */
        const size_t rlen = (size_t)(colon - (open + 2));
        if (rlen == 0 || rlen >= (size_t)rulecap || memchr(open + 2, '[', rlen) != NULL) continue;
        const char *why = reason_at(colon + 2);
        if (why == NULL) continue;
        memcpy(rule, open + 2, rlen);
        rule[rlen] = '\0';
        const char *after = colon + 2 + strlen(why) + 1;
        snprintf(rest, (size_t)restcap, "%.*s%s", (int)(open - message), message, after);
        return why;
    }
    return NULL;
}
