#!/usr/bin/env bash
# multinode.sh LOOM CKPT_COMPARE PHASE: loom-run across two "hosts" made of Linux network namespaces
# (a veth pair between them, mpirun starting its daemon on the other one through an rsh agent that
# runs `ip netns exec`), over TCP on addresses that exist only inside the two namespaces.
#   equal:  the 2-host job trains to the losses of 1 rank and to the checkpoint of 2 ranks on 1 host
#   link:   the link is taken down mid-run: the whole job ends (non-zero), naming rank 1 and its host
#   stop:   the same, the remote daemon and rank SIGSTOPped instead
#   resume: 2 hosts, SIGKILL of the writer during a save; the job resumes on 1 rank with the same losses
# Skips (77) where network namespaces cannot be made. Removes every namespace, link, process and temp
# file it made, on every exit path. Never sends a packet outside its namespaces.
set -u
LOOM=$1 CMP=$2 PHASE=$3
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CFG=$SRC/configs/tiny-train.json
TIMEOUT_S=5      # parallel.timeout_s of the runs that lose a host
GUARD=120        # 3x the bound: timeout_s + 3 s (asking who is alive) + 30 s
fail() { echo "FAIL: $*"; exit 1; }

W=$PWD/multinode_$PHASE
rm -rf "$W" && mkdir -p "$W/tmp" && cd "$W" || fail "cannot make $W"
A=loomA$$ B=loomB$$               # namespace = host name
NET=10.241.$(($$ % 250)).0/24
IPA=${NET%.0/24}.1 IPB=${NET%.0/24}.2

cleanup()
{
    local ns p
    for ns in "$A" "$B"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
    done
    for ns in "$A" "$B"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.2; done
        ip netns del "$ns" 2>/dev/null   # takes its end of the veth pair with it
    done
    rm -rf "$W/tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

for tool in ip unshare; do
    command -v $tool >/dev/null || { echo "SKIP: '$tool' not installed (iproute2, util-linux)"; exit 77; }
done
if ! ip netns add "$A" 2>/dev/null; then
    echo "SKIP: cannot create a network namespace (ip netns add: needs root or CAP_SYS_ADMIN)"; exit 77
fi
ip netns add "$B" || fail "ip netns add $B"
# the veth pair is made with its ends already inside the namespaces: nothing appears outside
ip link add veth0 netns "$A" type veth peer name veth0 netns "$B" || fail "cannot create a veth pair"
ip -n "$A" addr add "$IPA/24" dev veth0 && ip -n "$B" addr add "$IPB/24" dev veth0 || fail "ip addr add"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up && ip -n "$ns" link set veth0 up || fail "link up in $ns"; done
if ! ip netns exec "$A" unshare --uts true 2>/dev/null; then
    echo "SKIP: cannot give a namespace its own host name (unshare --uts)"; exit 77
fi

# The rsh agent: "agent [options] HOST COMMAND...": COMMAND (a shell line, as ssh would get it) in
# namespace HOST, under host name HOST.
cat >agent.sh <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
h=$1; shift
exec ip netns exec "$h" unshare --uts sh -c 'hostname "$0" && eval "$1"' "$h" "$*"
EOF
chmod +x agent.sh
printf '%s slots=1\n%s slots=1\n' "$A" "$B" >hosts2
printf '%s slots=2\n' "$A" >hosts1
export OMPI_MCA_plm_rsh_agent=$W/agent.sh OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$NET \
       OMPI_MCA_oob_tcp_if_include=$NET OMPI_MCA_orte_tmpdir_base=$W/tmp OMPI_MCA_mpi_yield_when_idle=1 \
       TMPDIR=$W/tmp

# on_host H CMD...: CMD in namespace H, under host name H (mpirun runs on host A).
on_host() { local h=$1; shift; ip netns exec "$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"; }
# loom_run HOSTFILE LOG ARGS...: loom-run -n 2 of `loom train` on host A, under a guard (124 = hung).
loom_run()
{
    local hf=$1 log=$2; shift 2
    on_host "$A" timeout -k 5 "$GUARD" "$SRC/launch/loom-run" -n 2 --hosts "$hf" -- \
        "$LOOM" train "$CFG" --set train.batch_size=4 --set parallel.threads=1 "$@" >"$log" 2>&1
}
losses() { sed -nE 's/.*"step": *([0-9]+),.*"loss": *([-0-9.eE+naif]+).*/\1 \2/p' "$1" | awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b'; }
show() { echo "--- $1 (last lines):"; tail -n "${2:-8}" "$1"; }
# close_losses A B: two "step loss" lists with the same steps, each loss within 2e-5 relative of
# the other's (test_dp's bound across world sizes: N ranks sum a step's gradients in another order
# than one rank, so their losses agree to rounding, not to the bit)
close_losses() {
    [ "$(echo "$1" | cut -d' ' -f1)" = "$(echo "$2" | cut -d' ' -f1)" ] || return 1
    paste -d' ' <(echo "$1") <(echo "$2") |
        awk -v num='^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$' '
            $2 !~ num || $4 !~ num { bad = 1; next } # nan, inf: never close
            { d = $2 - $4; if (d < 0) d = -d; a = $2 < 0 ? -$2 : $2; if (!(d <= 2e-5 * a)) bad = 1 }
            END { exit bad }'
}

# lose_host HOW: a long 2-host job; at step 3, HOW ("link": the link goes down on host B, "stop":
# B's daemon and rank are SIGSTOPped). The job must end by itself, non-zero, the lost rank named
# with its host, the events in order: loss, rank 0's timeout, loom-run's verdict, the end.
lose_host()
{
    local how=$1 log=lose_$1.log
    loom_run hosts2 "$log" --out "lose_$how" --set train.steps=1000000 --set parallel.timeout_s=$TIMEOUT_S &
    local job=$! i t_err="" t0 t_end rc
    for ((i = 0; i < 600; i++)); do
        grep -qs '"step": 3,' "lose_$how/metrics.jsonl" && break
        kill -0 $job 2>/dev/null || { show "$log"; fail "$how: the job ended before step 3"; }
        sleep 0.1
    done
    [ $i -lt 600 ] || { show "$log"; fail "$how: no step 3 within 60 s"; }
    t0=$(date +%s%N)
    if [ "$how" = link ]; then
        ip -n "$B" link set veth0 down || fail "link down on $B"
    else
        local p
        for p in $(ip netns pids "$B"); do kill -STOP "$p"; done
    fi
    while kill -0 $job 2>/dev/null; do
        [ -n "$t_err" ] || ! grep -q "loom: error:" "$log" || t_err=$(date +%s%N)
        sleep 0.1
    done
    t_end=$(date +%s%N)
    wait $job
    rc=$?
    show "$log" 6
    [ $rc -ne 0 ] || fail "$how: the job exited 0 after losing host $B"
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || fail "$how: the job hung (killed by the ${GUARD} s guard)"
    grep -qE "loom: error: .* on rank 0: no answer from rank 1 \(dead or stalled\)" "$log" ||
        fail "$how: no error from rank 0 naming the silent rank 1"
    grep -qE "^loom-run: error: lost rank 1 on host $B \(reported by rank 0 on host $A\)" "$log" ||
        fail "$how: no loom-run line naming rank 1 and its host $B"
    # order: rank 0's error line before loom-run's verdict (the verdict is the last line)
    local e v
    e=$(grep -n -m1 "loom: error:" "$log" | cut -d: -f1)
    v=$(grep -n "^loom-run: error: lost" "$log" | tail -1 | cut -d: -f1)
    [ "$e" -lt "$v" ] || fail "$how: loom-run's verdict (line $v) came before rank 0's error (line $e)"
    [ -z "$(ip netns pids "$A")" ] || fail "$how: processes left on host $A after loom-run ended: $(ip netns pids "$A")"
    [ -n "$t_err" ] || t_err=$t_end
    echo "ok: $how: the job ended (exit $rc) $(((t_end - t0) / 1000000)) ms after host $B was lost," \
         "$(((t_end - t_err) / 1000000)) ms after rank 0's timeout (timeout_s $TIMEOUT_S)"
}

case $PHASE in
equal)
    # the same 6 steps on 1 rank, on 2 ranks on host A, on 2 hosts
    "$LOOM" train "$CFG" --set train.batch_size=4 --set parallel.threads=1 --quiet --out one \
        --set train.steps=6 >one.log 2>&1 || { show one.log; fail "1-rank run failed"; }
    loom_run hosts1 local.log --out local --set train.steps=6 || { show local.log; fail "2 ranks on host A failed"; }
    loom_run hosts2 two.log --out two --set train.steps=6 || { show two.log; fail "2 hosts failed"; }
    grep -q "2 ranks (1 on this node)" two.log || { show two.log; fail "the 2-host job did not run one rank per host"; }
    grep -qE "^loom-run-rank: [0-9?]" two.log && fail "loom-run showed its rank-to-host lines"
    a=$(losses one/metrics.jsonl 1 6) b=$(losses two/metrics.jsonl 1 6)
    [ "$(echo "$a" | grep -c .)" -eq 6 ] || fail "1 rank: $(echo "$a" | grep -c .) logged losses, want 6"
    close_losses "$a" "$b" || fail "losses differ: 1 rank: $(echo $a) vs 2 hosts: $(echo $b)"
    "$CMP" local/ckpt/step_00000006.h5 two/ckpt/step_00000006.h5 >cmp.log ||
        { cat cmp.log; fail "2 hosts' checkpoint differs from 2 ranks on one host"; }
    echo "ok: 2 hosts over TCP: losses within 2e-5 of 1 rank's ($(echo $a | cut -d' ' -f1-4) ...)," \
         "checkpoint bitwise equal to 2 ranks on one host"
    ;;
link|stop)
    lose_host "$PHASE"
    ;;
resume)
    "$LOOM" train "$CFG" --set train.batch_size=4 --set parallel.threads=1 --quiet --out ref \
        --set train.steps=6 >ref.log 2>&1 || { show ref.log; fail "1-rank reference failed"; }
    # three runs, one checkpoint folder (each run's metrics.jsonl in its own --out)
    RUN=(--set train.steps=6 --set checkpoint.every=2 --set checkpoint.dir=$W/ck)
    # 2 hosts: saved at step 2, every rank exits at the start of step 3
    LOOM_FAULT_ACTION=exit LOOM_FAULT_RANK=all LOOM_FAULT_STEP=3 loom_run hosts2 a.log --out a "${RUN[@]}"
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { show a.log; fail "2 hosts to step 2: exit $rc, want the injected exit"; }
    [ "$(cat ck/latest)" = step_00000002.h5 ] || fail "latest after the first 2-host run: $(cat ck/latest)"
    # 2 hosts resume; rank 0 (host A, the writer) SIGKILLs itself in the middle of the step-4 file
    LOOM_FAULT_CKPT_PHASE=after_data loom_run hosts2 b.log --out b "${RUN[@]}" --resume ck
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || { show b.log; fail "kill during the save: exit $rc"; }
    grep -q "resumed from .* at step 2" b.log || { show b.log; fail "the 2-host resume did not start at step 2"; }
    ls -a ck | grep -q '\.tmp$' || { ls -a ck; fail "no half-written temp file: was the writer killed in the save?"; }
    [ "$(cat ck/latest)" = step_00000002.h5 ] || fail "latest after the killed save: $(cat ck/latest)"
    # 1 rank, no mpirun, finishes the job
    "$LOOM" train "$CFG" --set train.batch_size=4 --set parallel.threads=1 --out c "${RUN[@]}" \
        --resume ck >c.log 2>&1 || { show c.log; fail "the 1-rank resume failed"; }
    grep -q "resumed from .* at step 2" c.log || { show c.log; fail "the 1-rank resume did not start at step 2"; }
    want=$(losses ref/metrics.jsonl 1 6)
    got=$( (losses a/metrics.jsonl 1 2; losses c/metrics.jsonl 3 6) )
    [ "$(echo "$got" | cut -d' ' -f1 | tr '\n' ' ')" = "1 2 3 4 5 6 " ] || fail "logged steps: $(echo $got)"
    close_losses "$want" "$got" || fail "losses differ: uninterrupted 1 rank: $(echo $want) vs 2 hosts, killed, resumed on 1: $(echo $got)"
    close_losses "$(losses b/metrics.jsonl 3 4)" "$(losses ref/metrics.jsonl 3 4)" || fail "the killed 2-host run's steps 3-4 differ"
    echo "ok: killed in the step-4 save on 2 hosts, resumed on 1 rank from step 2: losses within 2e-5 of the uninterrupted run's ($(echo $got | cut -d' ' -f1-6) ...)"
    ;;
*) fail "unknown phase '$PHASE' (equal, link, stop or resume)" ;;
esac
