/* --only-backend=NAME[,NAME] and --only-check=GLOB[,GLOB] (docs/triage.md
 * "Selecting rows: --only-backend, --only-check"): which rows of each
 * selected case a run keeps, where --filter selects whole cases. A row is
 * kept when its backend is one of the named backends (when any is named)
 * and its check matches one of the globs (when any is given), except that
 * an ERROR row of a selected check stays whatever its backend: a reference
 * that could not run is why the named backend has no row. The backends
 * and checks that cannot give a kept row are not run at all.
 *
 * The selection is process-wide, set by kvrun before the workers fork. */
#ifndef KV_RUNNER_ROW_SELECT_H
#define KV_RUNNER_ROW_SELECT_H

#include <stdbool.h>

#include "runner/check/result.h"

/* Adds the comma-separated names of one --only-backend / --only-check
 * value; -1 for an empty name or past 16 of either. */
int kv_row_select_add_backends(const char *list);
int kv_row_select_add_checks(const char *list);
/* Whether any selection is set. */
bool kv_row_select_active(void);
/* Checks the selection against the backend names a row can carry (names,
 * n): KV_ERR_INVALID_ARG naming an unknown backend (with the known ones)
 * or a check glob whose check (before ':') names no check. */
kv_status kv_row_select_validate(const char *const *names, int n);
/* Whether rows of `backend` (a row's backend label) can be kept. */
bool kv_row_select_backend(const char *backend);
/* Whether check `kind` ("variants") can give a kept row. */
bool kv_row_select_check_kind(const char *kind);
/* Whether row r is kept. */
bool kv_row_select_keep(const kv_check_result *r);
/* " only-backend=a,b only-check=g" (what is set), for the report's
 * options and the run's fingerprint. */
void kv_row_select_describe(char *buf, int cap);
/* Clears the selection (tests). */
void kv_row_select_reset(void);

#endif
