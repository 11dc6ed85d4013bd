# resume_lib.sh: shared helpers for the end-to-end checkpoint tests (sourced, not run).
# Drives the real `loom` binary (under `timeout`, so a hang fails) on the tiny preset, one or more
# ranks. Must never write outside the test's own work folder or kill processes it did not start.
# The caller sets: LOOM (binary), CMP (ckpt_compare), MPIRUN (array: mpirun and its flags).
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TINY=$SRC/configs/tiny-train.json
# batch 12 splits evenly over 1..4 ranks; one BLAS thread per rank (2 cores, oversubscribed)
BASE=(--set train.batch_size=12 --set parallel.threads=1 --quiet)
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
export OMPI_MCA_mpi_yield_when_idle=1

fail() { echo "FAIL: $*"; exit 1; }

# work NAME: a fresh folder for this test, made the current directory.
work() { rm -rf "$1" && mkdir -p "$1" && cd "$1" || fail "cannot make $1"; }

# loom_np NP ARGS...: `loom ARGS` on NP ranks (1 = no mpirun); stdout+stderr kept in the caller's
# $LOG. Returns loom's exit status; 124 = hung (timeout: SIGTERM, which loom takes as "stop after
# this step", then SIGKILL 10 s later).
loom_np()
{
    local np=$1 v; shift
    if [ "$np" -eq 1 ]; then
        timeout -k 10 "$RUN_TIMEOUT" "$LOOM" "$@"
    else
        local xs=(-x OMPI_MCA_mpi_yield_when_idle)
        for v in LOOM_FAULT_ACTION LOOM_FAULT_RANK LOOM_FAULT_STEP LOOM_FAULT_COUNT; do [ -n "${!v:-}" ] && xs+=(-x "$v"); done
        timeout -k 10 "$RUN_TIMEOUT" "${MPIRUN[@]}" -np "$np" "${xs[@]}" "$LOOM" "$@"
    fi
}

# train NP OUT ARGS...: a training run that must succeed (exit 0, no hang).
train()
{
    local np=$1 out=$2; shift 2
    local log
    log=$(loom_np "$np" train "$TINY" --out "$out" "${BASE[@]}" "$@" 2>&1)
    local rc=$?
    [ $rc -eq 0 ] || { echo "$log" | tail -20; fail "exit $rc: np $np loom train --out $out $*"; }
}

# latest DIR: the checkpoint file `DIR/ckpt/latest` names.
latest() { local f; f=$(cat "$1/ckpt/latest" 2>/dev/null) || fail "$1/ckpt/latest missing"; echo "$1/ckpt/$f"; }

# losses FILE FROM TO: the printed losses of steps FROM..TO (one per line, as written).
losses()
{
    local f=$1 from=$2 to=$3 out n
    out=$(sed -nE 's/.*"step": *([0-9]+),.*"loss": *([-0-9.eE+naif]+).*/\1 \2/p' "$f" |
          awk -v a="$from" -v b="$to" '$1 >= a && $1 <= b { print $2 }')
    n=$(echo "$out" | grep -c .)
    [ "$n" -eq $((to - from + 1)) ] || fail "$f: $n losses for steps $from..$to"
    echo "$out"
}

# same_losses A B FROM TO: identical as printed.
same_losses()
{
    local a b
    a=$(losses "$1" "$3" "$4") || exit 1
    b=$(losses "$2" "$3" "$4") || exit 1
    [ "$a" = "$b" ] || fail "losses of steps $3..$4 differ: $1: $(echo $a) vs $2: $(echo $b)"
    echo "ok: losses of steps $3..$4 identical: $(echo $a)"
}

# close_losses A B FROM TO RTOL: |a-b| <= RTOL*|a| step by step.
close_losses()
{
    local a b
    a=$(losses "$1" "$3" "$4") || exit 1
    b=$(losses "$2" "$3" "$4") || exit 1
    paste <(echo "$a") <(echo "$b") | awk -v r="$5" '
        { d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1;
          if (!(d <= r * m)) { printf "step %d: %s vs %s (rel %.3g)\n", NR, $1, $2, d / m; bad = 1 } }
        END { exit bad }' || fail "losses of steps $3..$4 not within rtol $5: $1 vs $2"
    echo "ok: losses of steps $3..$4 within rtol $5: $(echo $a) vs $(echo $b)"
}

# same_ckpt A B: bitwise-equal /model, /optimizer/m, /optimizer/v and the same training state.
same_ckpt()
{
    local out
    out=$("$CMP" "$1" "$2") || { echo "$out"; fail "checkpoints differ: $1 vs $2"; }
    echo "$out" | sed 's/^/  /'
}

# refused NP PATTERN ARGS...: `loom ARGS` on NP ranks must fail cleanly: non-zero exit, no hang, no
# signal (a rank's crash under mpirun shows as "signal"), and a "loom: error:" line matching
# PATTERN (grep -E); exactly one such line on one rank.
refused()
{
    local np=$1 pattern=$2; shift 2
    local out rc n
    out=$(loom_np "$np" "$@" 2>&1)
    rc=$?
    [ $rc -ne 0 ] || { echo "$out" | tail; fail "exit 0 for: np $np loom $*"; }
    [ $rc -ne 124 ] || fail "hung (timeout ${RUN_TIMEOUT}s): np $np loom $*"
    [ $rc -lt 128 ] || { echo "$out" | tail; fail "killed by signal $((rc - 128)): np $np loom $*"; }
    if echo "$out" | grep -qiE "signal [0-9]+|segmentation fault|core dumped"; then
        echo "$out" | tail; fail "a rank crashed: np $np loom $*"
    fi
    n=$(echo "$out" | grep -cE "loom: error: .*$pattern")
    [ "$n" -ge 1 ] || { echo "$out" | tail; fail "no 'loom: error:' line matching /$pattern/: np $np loom $*"; }
    if [ "$np" -eq 1 ] && [ "$(echo "$out" | grep -c 'loom: error:')" -ne 1 ]; then
        echo "$out"; fail "want exactly one 'loom: error:' line: loom $*"
    fi
    echo "ok (np $np, exit $rc): $(echo "$out" | grep -m1 'loom: error:')"
}
