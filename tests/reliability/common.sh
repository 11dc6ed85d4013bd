# common.sh: sourced by the reliability scripts. Arguments of every script: LOOM CKPT_SCAN
# MPIRUN... (the mpirun prefix of tests/CMakeLists.txt). Each script works in its own folder under
# the current directory (the build tree), wiped first. Must never touch anything outside it.
set -u
LOOM=$1
SCAN=$2
shift 2
MPIRUN=("$@")
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CFG=$SRC/configs/tiny-train.json
# common settings: one BLAS thread per rank on a 2-core machine, a short collective timeout; no
# --quiet: the checks read info lines ("resumed from ...") from the log, and --quiet silences them
SETS=(--set parallel.threads=1 --set parallel.timeout_s=10)
WRAP=()   # a command each rank runs loom through (e.g. a shell that sets a ulimit first)

fail() { echo "FAIL: $*"; exit 1; }

workdir() { rm -rf "$1" && mkdir -p "$1" && cd "$1" || fail "cannot make $1"; }

# loom_np N ARGS...: `loom train` on N ranks (N=1: no mpirun), the LOOM_FAULT_* variables that
# are set passed to every rank; a 120 s guard (exit 124) so a hang fails the test instead of blocking it.
# Output (stdout+stderr) goes to the file $LOG; returns loom's exit status.
loom_np()
{
    local n=$1 v
    shift
    local xs=()
    for v in LOOM_FAULT_ACTION LOOM_FAULT_RANK LOOM_FAULT_STEP LOOM_FAULT_COUNT LOOM_FAULT_CKPT_PHASE; do
        [ -n "${!v:-}" ] && xs+=(-x "$v")
    done
    if [ "$n" -eq 1 ]; then
        timeout -k 10 120 "${WRAP[@]}" "$LOOM" train "$CFG" "${SETS[@]}" "$@" >"$LOG" 2>&1
    else
        timeout -k 10 120 "${MPIRUN[@]}" -np "$n" "${xs[@]}" "${WRAP[@]}" "$LOOM" train "$CFG" "${SETS[@]}" "$@" >"$LOG" 2>&1
    fi
}

# The step of the checkpoint `latest` points at in dir (loom ckpt info must succeed).
latest_step()
{
    local info
    info=$("$LOOM" ckpt info "$1" 2>&1) || { echo "$info" | tail -3 >&2; return 1; }
    echo "$info" | awk '$1 == "step" {print $2; exit}'
}

# The digest ckpt_scan prints for one file (fails on any non-finite value).
digest_of() { "$SCAN" "$1" | awk '{print $NF}'; }

# What a failed command printed, for the FAIL message.
show() { echo "--- $LOG (last lines):"; tail -n "${1:-8}" "$LOG"; }
