#!/usr/bin/env bash
# mutate.sh: the mutation harness (docs/testing.md). Each mutant of bench/mutants.txt (a small
# plausible bug: one exact text replaced in one file) is applied alone to a scratch copy of HEAD,
# the copy is rebuilt incrementally, the mutant's tests run, and a table says which test killed it.
# Never touches the working tree it is run from: the copy is `git archive HEAD`. Not run by CI.
#
# usage: bench/mutate.sh [-j N] [-t SECONDS] [-s SCRATCH] [-f MUTANTS] [-o TABLE] [-i FILE]... [-F] [-n] [ID...]
#   -j N        ctest -j and build -j (default 2)
#   -t SECONDS  per-test timeout (default 300)
#   -s SCRATCH  scratch folder (default /tmp/loom-mutate): SCRATCH/src is the copy, SCRATCH/build
#               its build (Release, LOOM_CUDA=OFF). An existing copy is reused unless -F.
#   -f MUTANTS  the list (default bench/mutants.txt next to this script)
#   -o TABLE    where the table goes (default SCRATCH/results.md)
#   -i FILE     also copy FILE (relative to the repository root) from the working tree over the
#               copy: a test not committed yet (repeatable; only files you name, never others' edits)
#   -F          fresh: remove SCRATCH's copy and build first
#   -n          check only: every mutant's text is found exactly once; nothing is built
#   ID...       only these mutants (default: all)
# Results: killed (the failing tests named), survived, compile error (not a kill), or bad mutant
# (its original text is not in the file exactly once: it is refused, nothing is applied).
set -u

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
jobs=2 tmo=300 scratch=/tmp/loom-mutate list="$here/mutants.txt" table="" fresh=0 check=0 extra=()
while getopts "j:t:s:f:o:i:Fnh" opt; do
    case $opt in
        j) jobs=$OPTARG ;; t) tmo=$OPTARG ;; s) scratch=$OPTARG ;; f) list=$OPTARG ;;
        o) table=$OPTARG ;; i) extra+=("$OPTARG") ;; F) fresh=1 ;; n) check=1 ;;
        *) sed -n '2,21p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ -f "$list" ] || { echo "mutate: no mutant list $list" >&2; exit 2; }
list=$(cd "$(dirname "$list")" && pwd)/$(basename "$list")
[ -n "$table" ] || table=$scratch/results.md
src=$scratch/src build=$scratch/build

# ---- the list: blocks of "key: value" lines (id, file, tests, desc, old, new), blank-line separated.
# In old/new, {NL} stands for a newline. Fills parallel arrays M_ID, M_FILE, ...
M_ID=() M_FILE=() M_TESTS=() M_DESC=() M_OLD=() M_NEW=()
flush() {
    [ -n "${b_id:-}" ] || return 0
    M_ID+=("$b_id") M_FILE+=("${b_file:-}") M_TESTS+=("${b_tests:-}") M_DESC+=("${b_desc:-}")
    M_OLD+=("${b_old:-}") M_NEW+=("${b_new-}")
    b_id="" b_file="" b_tests="" b_desc="" b_old="" b_new=""
}
b_id=""
while IFS= read -r line || [ -n "$line" ]; do
    case $line in
        '#'*) continue ;;
        '') flush; continue ;;
    esac
    key=${line%%:*} val=${line#*:}
    val=${val#"${val%%[! ]*}"} # the spaces after the colon
    case $key in
        id) b_id=$val ;; file) b_file=$val ;; tests) b_tests=$val ;; desc) b_desc=$val ;;
        old) b_old=$val ;; new) b_new=$val ;;
        *) echo "mutate: $list: unknown key '$key'" >&2; exit 2 ;;
    esac
done < "$list"
flush

# apply FILE OLD NEW: replaces the one occurrence of OLD; exit 3 when OLD is not there exactly once.
apply() {
    OLD=$2 NEW=$3 perl -e '
        my ($f) = @ARGV; local $/; open(my $h, "<", $f) or exit 4; my $s = <$h>; close $h;
        my ($o, $n) = ($ENV{OLD}, $ENV{NEW}); s/\{NL\}/\n/g for ($o, $n);
        my ($c, $p) = (0, 0); while (($p = index($s, $o, $p)) >= 0) { $c++; $p += length $o; }
        exit 3 if $c != 1 || $o eq "";
        substr($s, index($s, $o), length $o) = $n;
        open($h, ">", $f) or exit 4; print $h $s; close $h;' "$1"
}

# ---- the scratch copy and its build, once
if [ $fresh = 1 ]; then rm -rf "$src" "$build"; fi
if [ ! -d "$src" ]; then
    mkdir -p "$src" && git -C "$repo" archive HEAD | tar -x -C "$src" || { echo "mutate: cannot copy HEAD" >&2; exit 1; }
    git -C "$repo" rev-parse --short HEAD > "$scratch/copied-head"
    echo "mutate: copied $(cat "$scratch/copied-head") to $src"
fi
for x in "${extra[@]}"; do # copied only when changed: an unchanged file is not rebuilt
    [ -f "$repo/$x" ] || { echo "mutate: -i $x: no such file" >&2; exit 2; }
    mkdir -p "$src/$(dirname "$x")"
    cmp -s "$repo/$x" "$src/$x" || cp "$repo/$x" "$src/$x"
done

pick() { # is mutant $1 selected?
    [ ${#sel[@]} -eq 0 ] && return 0
    local s; for s in "${sel[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1
}
sel=("$@")

if [ $check = 1 ]; then
    bad=0
    for i in "${!M_ID[@]}"; do
        pick "${M_ID[$i]}" || continue
        f=$src/${M_FILE[$i]}
        cp "$f" "$scratch/check.tmp" 2>/dev/null || { echo "${M_ID[$i]}: no file ${M_FILE[$i]}"; bad=1; continue; }
        apply "$scratch/check.tmp" "${M_OLD[$i]}" "${M_NEW[$i]}" || { echo "${M_ID[$i]}: original text not found exactly once"; bad=1; }
    done
    rm -f "$scratch/check.tmp"
    echo "mutate: ${#M_ID[@]} mutants listed"; exit $bad
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=OFF > "$scratch/configure.log" 2>&1 ||
        { echo "mutate: configure failed ($scratch/configure.log)" >&2; exit 1; }
fi
echo "mutate: building the unmutated copy"
cmake --build "$build" -j"$jobs" > "$scratch/build.log" 2>&1 || { echo "mutate: the unmutated copy does not build ($scratch/build.log)" >&2; exit 1; }

# ---- one mutant at a time
mkdir -p "$scratch/logs"
rows=() nk=0 ns=0 nc=0 nb=0 nrun=0
for i in "${!M_ID[@]}"; do
    id=${M_ID[$i]}; pick "$id" || continue
    nrun=$((nrun + 1))
    f=$src/${M_FILE[$i]} log=$scratch/logs/$id.log killer=""
    cp "$f" "$scratch/orig.tmp" || { rows+=("$id"$'\x1f'"${M_DESC[$i]}"$'\x1f'"bad mutant (no file)"$'\x1f'); nb=$((nb + 1)); continue; }
    if ! apply "$f" "${M_OLD[$i]}" "${M_NEW[$i]}"; then
        cp "$scratch/orig.tmp" "$f"
        result="bad mutant (text not found once)"; nb=$((nb + 1))
    elif ! cmake --build "$build" -j"$jobs" > "$log" 2>&1; then
        result="compile error"; nc=$((nc + 1))
    else
        (cd "$build" && ctest -j"$jobs" --timeout "$tmo" -R "${M_TESTS[$i]}" --output-on-failure) >> "$log" 2>&1
        ran=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1 \2/p' "$log" | tail -1)
        killer=$(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (.*/\1/p' "$log" | sort -u | paste -sd, -)
        if [ -z "$ran" ] || [ "${ran#* }" = 0 ]; then
            result="no tests ran"; nb=$((nb + 1))
        elif [ -n "$killer" ]; then
            result="killed"; nk=$((nk + 1))
        else
            result="survived"; ns=$((ns + 1))
        fi
    fi
    cp "$scratch/orig.tmp" "$f" # a fresh mtime: the next build recompiles it
    printf '%-24s %-16s %s\n' "$id" "$result" "$killer"
    rows+=("$id"$'\x1f'"${M_DESC[$i]//|/\\|}"$'\x1f'"$result"$'\x1f'"$killer")
done
rm -f "$scratch/orig.tmp"
cmake --build "$build" -j"$jobs" > "$scratch/build.log" 2>&1 # leave the copy unmutated

{
    echo "mutation run $(date -u '+%Y-%m-%d %H:%M UTC'), copy of $(cat "$scratch/copied-head" 2>/dev/null || echo '?'), list $(basename "$list")"
    echo
    echo "| id | mutant | result | killed by |"
    echo "|---|---|---|---|"
    for r in "${rows[@]}"; do
        IFS=$'\x1f' read -r a b c d <<< "$r"
        echo "| $a | $b | $c | ${d//,/, } |"
    done
    echo
    echo "$nrun mutants: $nk killed, $ns survived, $nc compile errors, $nb not run (bad mutant or no tests)"
} > "$table"
cat "$table"
[ $ns = 0 ] && [ $nb = 0 ]
