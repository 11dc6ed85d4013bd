#!/usr/bin/env bash
# info_and_plot.sh LOOM HAVE_MPI: `loom info` prints parsable "key: value" lines that match the
# build; a short run leaves loss.svg with one train point per logged step, titled with the job's
# name, every tick label a round value (at most 4 significant digits, never negative: loss and
# tokens/s are not), and a legend of only the series drawn (no validation ran: no "val loss").
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
grep -q '>tiny-train: loss and throughput<' plot_out/loss.svg || { echo "FAIL: the title is not the job's name"; exit 1; }
labels=$(grep -o '<text[^>]*>[^<]*</text>' plot_out/loss.svg | sed 's/<text[^>]*>//; s/<.text>//' |
  grep -E '^-?[0-9.e+]+$')
[ -n "$labels" ] || { echo "FAIL: no tick labels"; exit 1; }
odd=$(grep -vE '^(0|[1-9][0-9]*|[0-9]+\.[0-9]{1,3}|0\.0[0-9]{1,3})$' <<<"$labels" || true)
[ -z "$odd" ] || { echo "FAIL: tick labels not round or negative: $odd"; exit 1; }
! grep -q '>val loss<' plot_out/loss.svg || { echo "FAIL: the legend names val loss, which was not drawn"; exit 1; }
echo "ok: info parses and matches the build; loss.svg has $n points"
