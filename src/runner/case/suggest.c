/* Optimal string alignment distance, the one "fitler" -> "filter" needs
 * (a swap is one edit, as people mistype). */
#include "runner/case/suggest.h"

#include <string.h>

int kv_suggest_distance(const char *a, const char *b) {
    enum { MAXLEN = 63 };
    const size_t la = strlen(a), lb = strlen(b);
    if (la > MAXLEN || lb > MAXLEN) return KV_SUGGEST_MAX_EDITS + 1;
    int d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}
