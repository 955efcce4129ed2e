#!/bin/sh
# report.html's heat map covers the whole failing output (docs/reports.md
# "Heat maps"): tests/plugins/faulty.c's "scatter" puts 39 wrong elements
# across a 64x64 add.Tensor output; results.jsonl's heat grid counts all
# 39, the page draws 39 cells (a 32x32 grid of 2x2 elements; every 105th
# element never shares a cell), with or without gnuplot. The card names
# its tolerance rule and links to the rationale, given once.
. tests/ci/lib.sh
PLUGIN=$(dirname "$KVRUN")/tests/faulty/libfaulty.so
[ -f "$PLUGIN" ] || { bad "$PLUGIN not built (ninja tests builds it)"; finish; }
mkdir "$T/nobin"
expect 1 "39 of 4096 elements differ" "39 scattered wrong elements" -- \
    env KV_TEST_FAULT=scatter PATH="$T/nobin" $KVRUN --backend=$PLUGIN --op=add.Tensor --dtype=f32 --shape=64x64 \
    --report-dir="$T/r"
H="$T/r/report.html"
# "heat": [rows, cols, grows, gcols, cell, count, ...]
grep '"check":"variants:faulty"' "$T/r/results.jsonl" | sed 's/.*"heat":\[\([0-9,]*\)\].*/\1/' | tr ',' '\n' > "$T/heat"
head -4 "$T/heat" | tr '\n' ' ' | grep -q '^64 64 32 32 $' && ok "the grid: 64x64 in 32x32 cells" || bad "grid: $(head -4 "$T/heat" | tr '\n' ' ')"
pairs=$(($(wc -l < "$T/heat") / 2 - 2))
sum=$(tail -n +5 "$T/heat" | awk 'NR % 2 == 0 { s += $1 } END { print s + 0 }')
[ "$pairs" -eq 39 ] && [ "$sum" -eq 39 ] && ok "results.jsonl counts all 39, in 39 cells" ||
    bad "results.jsonl: $pairs cells, $sum elements"
drawn=$(grep -o 'M[0-9]* [0-9]*h1v1h-1z' "$H" | wc -l)
[ "$drawn" -eq 39 ] && ok "report.html draws 39 cells" || bad "report.html draws $drawn cells, not 39"
grep -q '32 &#215; 32 cells of up to 2 &#215; 2 elements' "$H" && ok "the caption names the grid" || bad "no grid caption"
# add.Tensor f32 is bitwise: the card names the rule, the rationale once.
grep -q '<td><a href="#tol0">bitwise</a></td>' "$H" && ok "the card names its rule, linked" || bad "no rule on the card"
n=$(grep -o 'one IEEE operation per element' "$H" | wc -l)
[ "$n" -eq 1 ] && ok "the rationale is on the page once" || bad "the rationale is on the page $n times"
grep -q 'one IEEE operation per element' "$T/r/results.jsonl" && ok "results.jsonl keeps it in the message" ||
    bad "results.jsonl lost the rationale"
finish
