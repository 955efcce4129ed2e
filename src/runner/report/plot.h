/* Plots for the HTML reports, drawn by gnuplot (Debian gnuplot-nox) as
 * SVG and embedded inline, so a page works offline and holds no script.
 *
 * A report gathers every plot of a page into one kv_plot_batch: one
 * gnuplot process draws them all (a process per plot would cost tens of
 * milliseconds each), each into its own SVG file in a temporary folder.
 * gnuplot runs as a child with a timeout; when it is not installed, times
 * out or fails, the batch says so, and the page shows that sentence where
 * each plot would be: a report is never failed, nor silently plotless,
 * for want of a plot. */
#ifndef KV_RUNNER_PLOT_H
#define KV_RUNNER_PLOT_H

#include <stdbool.h>
#include <stdio.h>

#include "kv/status.h"

/* How long one gnuplot run may take before it is killed. */
#define KV_PLOT_TIMEOUT_SECONDS 20.0

typedef struct kv_plot_batch kv_plot_batch;

/* A batch whose plots are written into a fresh temporary folder; NULL
 * only when out of memory or no folder can be made (message set). */
kv_plot_batch *kv_plot_batch_new(void);
/* Starts plot number k (returned, from 0): `script` is gnuplot commands
 * that plot (its data inline, "$data << EOD"); the batch sets the SVG
 * terminal (size w x h pixels) and the output before them. */
int kv_plot_add(kv_plot_batch *b, int w, int h, const char *script);
/* Runs gnuplot on every plot added; false when it did not run or failed
 * (kv_plot_problem says why). */
bool kv_plot_run(kv_plot_batch *b);
/* Writes plot k's <svg> element (the XML prolog dropped) to f, or, when
 * there is none, a <p class="noplot"> naming why. */
void kv_plot_put(kv_plot_batch *b, int k, FILE *f);
/* Why the batch has no plots ("" when it has them). */
const char *kv_plot_problem(const kv_plot_batch *b);
/* Removes the temporary folder and frees the batch. */
void kv_plot_batch_free(kv_plot_batch *b);

/* Writes `s` as a gnuplot string literal (single quotes, '' inside). */
void kv_plot_put_string(FILE *f, const char *s);

#endif
