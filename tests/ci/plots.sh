#!/bin/sh
# The report's plots (README "Plots"): gnuplot draws them as inline SVG;
# a failing output gets a heat map, an op with ULP errors a histogram per
# backend; without gnuplot, or when it fails, each plot's place says why
# and the run's outcome is the same.
. tests/ci/lib.sh
PLUGIN=$(dirname "$KVRUN")/tests/dump-plugin/libwrong_neg.so
[ -f "$PLUGIN" ] || { bad "$PLUGIN not built (ninja tests builds it)"; finish; }
CASE="--op=neg --dtype=f32 --shape=4x5 --fill=exact"
H="$T/r/report.html"
if command -v gnuplot >/dev/null 2>&1; then
    expect 1 "check=variants:wrongneg" "a failing run with gnuplot" -- \
        $KVRUN --backend=$PLUGIN $CASE --report-dir="$T/r"
    grep -q 'Produced by GNUPLOT' "$H" && ok "the plots are gnuplot's SVG, inline" || bad "no gnuplot SVG in report.html"
    grep -q '<title>Gnuplot</title>' "$H" && ! grep -q '<?xml' "$H" && ok "the SVG prologs are dropped" ||
        bad "an SVG prolog is left in report.html"
    grep -q '2 of 20 elements differ' "$H" && ok "the failing output has its heat map" || bad "no heat map"
    grep -q 'neg: max ULP error of each compared row, per backend' "$H" && ok "neg has its ULP histogram" ||
        bad "no ULP histogram for neg"
    ! grep -q 'class="noplot"' "$H" && ok "every plot was drawn" || bad "a plot was not drawn"
else
    echo "skipped: gnuplot not installed (the plots with gnuplot)"
fi
# Without gnuplot on PATH: the same outcome, and each plot says why.
mkdir "$T/nobin"
expect 1 "check=variants:wrongneg" "a failing run without gnuplot: the same exit code" -- \
    env PATH="$T/nobin" $KVRUN --backend=$PLUGIN $CASE --report-dir="$T/r"
grep -q 'gnuplot is not installed' "$H" && ok "report.html says gnuplot is missing" || bad "no word of the missing gnuplot"
! grep -q 'Produced by GNUPLOT' "$H" && ok "and draws nothing" || bad "a plot without gnuplot?"
# A gnuplot that fails: its message is in the report, the run goes on.
printf '#!/bin/sh\necho "line 3: boom" >&2\nexit 3\n' > "$T/nobin/gnuplot"
chmod +x "$T/nobin/gnuplot"
expect 1 "check=variants:wrongneg" "a failing gnuplot: the same exit code" -- \
    env PATH="$T/nobin" $KVRUN --backend=$PLUGIN $CASE --report-dir="$T/r"
grep -q 'gnuplot failed (exit status 3): line 3: boom' "$H" && ok "report.html names gnuplot's failure" ||
    bad "gnuplot's failure is not named"
finish
