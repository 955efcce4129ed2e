#!/bin/sh
# The kvrun(1) man page from kvrun's --help text (src/tools/kvrun_help.txt,
# the one source; help_to_c.sh makes `kvrun --help` of it). The text's
# shape is the grammar: the `usage:` lines are the synopsis, a line that
# starts with two spaces and a dash is an option (its description starts
# at the next run of two or more spaces and continues on the lines
# indented past it), a line ending in ':' that starts a paragraph is a
# section, anything else is running text.
# usage: help_to_man.sh HELP.txt VERSION OUT.1
set -eu
in=$1 version=$2 out=$3
awk -v version="$version" '
function esc(s) {
    gsub(/\\/, "\\e", s)
    gsub(/-/, "\\-", s)
    sub(/^[.'"'"']/, "\\\\\\&&", s)
    return s
}
BEGIN {
    print ".\\\" Generated from src/tools/kvrun_help.txt by src/tools/help_to_man.sh."
    print ".TH KVRUN 1 \"\" \"kvsuite " version "\" \"kvsuite\""
    print ".SH NAME"
    print "kvrun \\- run kvsuite cases against the golden store on every backend"
    state = "synopsis"
    print ".SH SYNOPSIS"
    print ".nf"
}
state == "synopsis" {
    if ($0 == "") { print ".fi"; print ".SH DESCRIPTION"; state = "text"; para = 1; next }
    line = $0; sub(/^usage: /, "", line); sub(/^       /, "", line)
    print esc(line)
    next
}
/^$/ { para = 1; inopt = 0; next }
/^  -/ {
    line = $0; sub(/^  /, "", line)
    # The option and its description are split at the first run of two
    # or more spaces; an option alone on its line has none.
    if (match(line, /  +/)) {
        opt = substr(line, 1, RSTART - 1); desc = substr(line, RSTART + RLENGTH)
    } else { opt = line; desc = "" }
    print ".TP"
    print "\\fB" esc(opt) "\\fR"
    if (desc != "") print esc(desc)
    inopt = 1; para = 0
    next
}
inopt && /^      / { line = $0; sub(/^ +/, "", line); print esc(line); next }
{
    line = $0
    if (para && line ~ /:$/ && line !~ / .* .* .* .* / ) {
        # A short line ending in a colon opens a section (Exit status:).
        print ".SH " toupper(substr(line, 1, length(line) - 1))
    } else {
        if (para) print ".PP"
        sub(/^ +/, "", line)
        print esc(line)
    }
    para = 0; inopt = 0
}
' "$in" >"$out.tmp"
mv "$out.tmp" "$out"
