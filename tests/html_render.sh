#!/bin/sh
# Renders kvrun's HTML reports in headless Chromium (README "Looking at
# the reports in a browser"): for each page, its size (at most 1 MiB), its
# render time (at most 2 s) and a full-page screenshot PAGE.png beside it.
#
#   sh tests/html_render.sh [PAGE.html...]   (default: reports/report.html
#                                             and reports/perf.html)
#
# The render time is measured inside Chromium: a wrapper page loads the
# report into an iframe and takes performance.now() from before the load
# until the iframe's load event and a forced layout of its document
# (parse, style, layout and its inline SVG), so Chromium's own start-up,
# which is seconds on a busy machine, is not counted. A timing on a shared
# machine only ever comes out slower than the page is, so a page over the
# limit is measured up to 3 times and judged by its fastest.
#
# A page that writes anything to the browser's console (an uncaught
# error in its script, a failed resource) fails too: the console log of
# the page loaded on its own is read from Chromium's own log.
#
# Exit 0 when every page is within its limits; 1 when a page is over a
# limit, logs to the console, or Chromium fails or is not installed
# (.ci/install-deps.sh installs Debian's chromium: CI gates on this); 2 on
# a usage error (a page that does not exist).
LIMIT_BYTES=1048576
LIMIT_MS=2000
CHROMIUM=${CHROMIUM:-chromium}
if ! command -v "$CHROMIUM" >/dev/null 2>&1; then
    echo "html_render: $CHROMIUM is not installed (sh .ci/install-deps.sh installs Debian's chromium)" >&2
    exit 1
fi
[ "$#" -gt 0 ] || set -- reports/report.html reports/perf.html
for page in "$@"; do
    if [ ! -f "$page" ]; then
        echo "html_render: $page: no such file (ninja run writes reports/report.html," \
            "build/kvrun --mode=perf ... writes reports/perf.html)" >&2
        exit 2
    fi
done
T=$(mktemp -d "${TMPDIR:-/tmp}/kv-render.XXXXXX")
trap 'rm -rf "$T"' EXIT
# Chromium as root needs --no-sandbox; headless needs no GPU.
# No background networking: this machine's network is closed, and
# Chromium's own connections would only fail and slow it down.
chrome() {
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --allow-file-access-from-files \
        --disable-background-networking --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$T/profile" "$@" 2>"$T/chrome.err"
}

# render PAGE_DIR PAGE_NAME: prints "MS HEIGHT SVGS" (empty on failure).
render() {
    cat >"$1/.kv-render-wrap.html" <<EOF
<!DOCTYPE html><html><body><pre id="t">pending</pre>
<iframe id="f" style="width:1280px;height:900px;border:0"></iframe>
<script>
var f = document.getElementById('f'), t0 = performance.now();
f.onload = function () {
  var d = f.contentDocument, h = d ? d.documentElement.scrollHeight : -1;
  var t1 = performance.now();
  document.getElementById('t').textContent = 'render ' + Math.round(t1 - t0) + ' ' + h + ' ' +
    (d ? d.querySelectorAll('svg').length : -1) + ' end';
};
f.src = '$2';
</script></body></html>
EOF
    chrome --dump-dom "file://$1/.kv-render-wrap.html" | sed -n 's/.*render \([0-9]*\) \([0-9-]*\) \([0-9-]*\) end.*/\1 \2 \3/p'
    rm -f "$1/.kv-render-wrap.html"
}

nfail=0
for page in "$@"; do
    dir=$(cd "$(dirname "$page")" && pwd)
    name=$(basename "$page")
    bytes=$(wc -c <"$page")
    best="" height="" svgs=""
    for attempt in 1 2 3; do
        set -- $(render "$dir" "$name")
        if [ "$#" -ne 3 ]; then
            echo "FAIL $page: Chromium did not render it: $(tail -1 "$T/chrome.err")"
            nfail=$((nfail + 1))
            best=""
            break
        fi
        if [ -z "$best" ] || [ "$1" -lt "$best" ]; then best=$1; fi
        height=$2 svgs=$3
        [ "$best" -le "$LIMIT_MS" ] && break
    done
    [ -n "$best" ] || continue
    png="$dir/${name%.html}.png"
    # The screenshot is the viewport: as tall as the page (cut at 16384 px).
    h=$height
    [ "$h" -gt 16384 ] && h=16384
    [ "$h" -lt 600 ] && h=600
    chrome --screenshot="$png" --window-size=1280,"$h" "file://$dir/$name" >/dev/null
    shot="screenshot $png (1280x$h)"
    [ -s "$png" ] || shot="no screenshot: $(tail -1 "$T/chrome.err")"
    # The page on its own, with Chromium's log on stderr: every console
    # message of the page is a line with ":CONSOLE".
    chrome --enable-logging=stderr --v=0 --dump-dom "file://$dir/$name" >/dev/null
    console=$(grep ":CONSOLE" "$T/chrome.err" | head -3)
    verdict=ok
    [ "$bytes" -le "$LIMIT_BYTES" ] && [ "$best" -le "$LIMIT_MS" ] && [ -z "$console" ] || verdict=FAIL
    [ -z "$console" ] || echo "FAIL $page: it wrote to the browser console: $console"
    echo "$verdict $page: $bytes bytes (limit $LIMIT_BYTES), rendered in $best ms (limit $LIMIT_MS; attempt $attempt)," \
        "$svgs inline SVG plots, page height $height px; $shot"
    [ "$verdict" = ok ] || nfail=$((nfail + 1))
done
if [ "$nfail" -ne 0 ]; then
    echo "html_render: $nfail page(s) over a limit or not rendered"
    exit 1
fi
echo "html_render: every page within its limits"
