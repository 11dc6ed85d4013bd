#!/usr/bin/env bash
# info_and_plot.sh LOOM HAVE_MPI: `loom info` prints parsable "key: value" lines that match the
# build; a short run leaves loss.svg with one train point per logged step.
set -u
loom=$1 have_mpi=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
info=$("$loom" info) || { echo "FAIL: loom info exited non-zero"; exit 1; }
echo "$info"
bad=$(echo "$info" | grep -vE '^[a-z0-9_.]+: .+' || true)
[ -z "$bad" ] || { echo "FAIL: unparsable lines: $bad"; exit 1; }
echo "$info" | grep -qE '^backends:.* cpu' || { echo "FAIL: no cpu backend listed"; exit 1; }
echo "$info" | grep -qE '^selected: (cpu|cuda|metal) ' || { echo "FAIL: no selected backend"; exit 1; }
want=no; [ "$have_mpi" = ON ] && want=yes
echo "$info" | grep -qx "mpi: $want" || { echo "FAIL: mpi line does not match the build ($want)"; exit 1; }
[ "$(LOOM_BACKEND=cpu "$loom" info | grep '^selected:')" = "selected: cpu (LOOM_BACKEND)" ] || { echo "FAIL: LOOM_BACKEND not honoured"; exit 1; }

rm -rf plot_out
"$loom" train "$root/configs/tiny-train.json" --set train.steps=7 --out plot_out --quiet >/dev/null || { echo "FAIL: run"; exit 1; }
[ -s plot_out/loss.svg ] || { echo "FAIL: no loss.svg"; exit 1; }
n=$(grep -o 'class="train-point"' plot_out/loss.svg | wc -l)
[ "$n" -eq 7 ] || { echo "FAIL: loss.svg has $n train points, want 7"; exit 1; }
head -c 5 plot_out/loss.svg | grep -q '<svg' || { echo "FAIL: not an SVG"; exit 1; }
echo "ok: info parses and matches the build; loss.svg has $n points"
