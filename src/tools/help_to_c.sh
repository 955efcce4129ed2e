#!/bin/sh
# kvrun's --help text, src/tools/kvrun_help.txt, as one C string
# (kv_kvrun_help): the single source of `kvrun --help`, the kvrun(1) man
# page (help_to_man.sh) and docs/kvrun.md's option reference
# (docs/gen/sections.sh), so the three cannot disagree.
# usage: help_to_c.sh HELP.txt OUT.c
set -eu
in=$1 out=$2
{
    echo '/* Generated from src/tools/kvrun_help.txt by src/tools/help_to_c.sh. */'
    echo 'const char kv_kvrun_help[] ='
    # Escape backslashes and quotes; one C string literal per line.
    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$/\\n"/' "$in"
    echo '    ;'
} >"$out.tmp"
mv "$out.tmp" "$out"
