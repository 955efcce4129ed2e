/* The heat map of a failing output in report.html: where its wrong elements
 * are over the whole output, from the row's kv_heat (result.h), drawn as
 * inline SVG by this file rather than gnuplot: a cell per rectangle only
 * where something is wrong, one path per colour, so a map costs at most a
 * few bytes per cell (about 15 KB for a wholly wrong 32 x 32 grid) and is
 * drawn on machines without gnuplot too. */
#include "runner/report/report_internal.h"

#include <inttypes.h>

/* The share of a cell's elements that differ, in quarters: (0, 1/4] is
 * level 0, (3/4, 1] level 3. Colours from pale orange to deep purple, so
 * a cell with one wrong element among thousands still shows. */
#define HEAT_LEVELS 4
static const char *const heat_colors[HEAT_LEVELS] = { "#ffb74d", "#f4511e", "#c62828", "#4a148c" };

/* Elements of the output in cell row i: rows r with r * g / n == i, that
 * is [ceil(i n / g), ceil((i + 1) n / g)). */
static int64_t heat_span(int64_t n, int g, int i) {
    const int64_t lo = (i * n + g - 1) / g, hi = ((i + 1) * n + g - 1) / g;
    return hi - lo;
}

static int heat_level(const kv_heat *h, int i, int j) {
    const double all = (double)heat_span(h->rows, h->grows, i) * (double)heat_span(h->cols, h->gcols, j);
    const double share = all > 0 ? h->cells[i * h->gcols + j] / all : 1.0;
    int level = (int)(share * HEAT_LEVELS + 0.999999) - 1;
    return level < 0 ? 0 : (level >= HEAT_LEVELS ? HEAT_LEVELS - 1 : level);
}

bool kv_report_heat_recorded(const kv_heat *h) {
    if (h->grows <= 0 || h->gcols <= 0 || h->grows > KV_HEAT_GRID || h->gcols > KV_HEAT_GRID || h->rows < 1 ||
        h->cols < 1)
        return false;
    for (int k = 0; k < h->grows * h->gcols; k++)
        if (h->cells[k] != 0) return true;
    return false;
}

bool kv_report_put_heat(FILE *f, const kv_check_result *r, int id) {
    const kv_heat *h = &r->heat;
    if (!kv_report_heat_recorded(h)) return false;
    /* Square cells, the map at most about 384 px on its long side. */
    const int longest = h->grows > h->gcols ? h->grows : h->gcols;
    int px = 384 / longest;
    px = px > 24 ? 24 : (px < 8 ? 8 : px);
    int64_t counted = 0;
    for (int k = 0; k < h->grows * h->gcols; k++) counted += h->cells[k];
    fprintf(f,
            "<svg class=\"heat\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "shape-rendering=\"crispEdges\" role=\"img\">\n<title>%" PRId64 " of %" PRId64 " elements differ</title>\n"
            "<defs><pattern id=\"hg%d\" width=\"1\" height=\"1\" patternUnits=\"userSpaceOnUse\"><path d=\"M1 0V1H0\" "
            "fill=\"none\" stroke=\"#c8e6c9\" stroke-width=\"0.06\"/></pattern></defs>\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"#f1f8e9\"/><rect width=\"%d\" height=\"%d\" fill=\"url(#hg%d)\"/>\n",
            h->gcols * px, h->grows * px, h->gcols, h->grows, r->mismatched, r->compared, id, h->gcols, h->grows,
            h->gcols, h->grows, id);
    for (int level = 0; level < HEAT_LEVELS; level++) {
        bool open = false;
        for (int i = 0; i < h->grows; i++)
            for (int j = 0; j < h->gcols; j++) {
                if (h->cells[i * h->gcols + j] == 0 || heat_level(h, i, j) != level) continue;
                if (!open) fprintf(f, "<path fill=\"%s\" d=\"", heat_colors[level]);
                open = true;
                fprintf(f, "M%d %dh1v1h-1z", j, i);
            }
        if (open) fputs("\"/>\n", f);
    }
    fputs("</svg>\n", f);
    const int64_t cr = heat_span(h->rows, h->grows, 0), cc = heat_span(h->cols, h->gcols, 0);
    fprintf(f, "<p class=\"heatnote\">%" PRId64 " of %" PRId64 " elements differ. The whole output, ", r->mismatched,
            r->compared);
    if (r->heat.rows == 1 && r->heat.cols == 1) fputs("one element", f);
    else
        fprintf(f, "%" PRId64 " row%s (%s) by %" PRId64 " column%s (its last index)", h->rows, h->rows == 1 ? "" : "s",
                "its leading indices, folded, top to bottom", h->cols, h->cols == 1 ? "" : "s");
    if (cr * cc > 1)
        fprintf(f, ", in %d &#215; %d cells of up to %" PRId64 " &#215; %" PRId64 " elements", h->grows, h->gcols, cr, cc);
    else fputs(", a cell per element", f);
    fputs("; a cell's colour is the share of its elements that differ:", f);
    static const char *const shares[HEAT_LEVELS] = { "up to 1/4", "up to 1/2", "up to 3/4", "more" };
    for (int level = 0; level < HEAT_LEVELS; level++)
        fprintf(f, " <span class=\"swatch\" style=\"background:%s\"></span> %s", heat_colors[level], shares[level]);
    /* Counts past UINT16_MAX per cell saturate (result.h): say so rather
     * than show a smaller total. */
    if (counted != r->mismatched)
        fprintf(f, " (the cells count %" PRId64 ": a count past %d per cell is not kept)", counted, UINT16_MAX);
    fputs(".</p>\n", f);
    return true;
}
