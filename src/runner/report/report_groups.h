/* The failing rows of a run grouped by (op, check, backend), for the
 * console's short summary (report_short.c) and report.html's index of
 * failures: a kernel wrong on nine layouts reads as one group, its
 * layouts and dtypes folded into one list each. */
#ifndef KV_RUNNER_REPORT_GROUPS_H
#define KV_RUNNER_REPORT_GROUPS_H

#include <stdint.h>

#include "runner/check/result.h"

/* Layouts and dtypes named per group; the rest are said to exist. */
#define KV_GROUP_VALUES 12
#define KV_GROUP_VALUE_MAX 24

typedef struct kv_report_group {
    const kv_check_result *first;   /* its first failing row */
    int64_t first_ordinal;          /* that row's place among the failing rows, from 0 */
    int64_t rows;
    int64_t by_status[KV_RESULT_STATUS_COUNT];
    char layouts[KV_GROUP_VALUES][KV_GROUP_VALUE_MAX];
    int nlayouts, more_layouts;
    char dtypes[KV_GROUP_VALUES][KV_GROUP_VALUE_MAX];
    int ndtypes, more_dtypes;
} kv_report_group;

typedef struct kv_report_groups {
    kv_report_group *items;         /* the first `cap` groups, in the order of their first failing row */
    int n;
    int64_t nbad;                   /* failing rows in all */
    int64_t more_groups, more_rows; /* the groups past `cap`, and their rows */
} kv_report_groups;

/* Groups the failing rows (kv_result_status_is_bad) of `rows`. The groups
 * point into `rows`, which must outlive them. KV_ERR_OOM on no memory. */
kv_status kv_report_groups_of(const kv_result_list *rows, int cap, kv_report_groups *out);
void kv_report_groups_free(kv_report_groups *gs);
/* The most severe status among a group's rows. */
kv_result_status kv_report_group_worst(const kv_report_group *g);
/* The layout= value of a case ID ("c" when the ID has none: contiguous is
 * the default and left out of IDs). */
void kv_report_layout_of(const char *case_id, char *buf, int cap);

#endif
