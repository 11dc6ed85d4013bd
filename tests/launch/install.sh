#!/usr/bin/env bash
# install.sh CMAKE BUILD: `cmake --install BUILD --prefix P` puts loom and loom-run in P/bin and the
# docs in P/share/doc/loom; the installed loom runs (--version, and `config show` of a job from
# outside the source tree); the installed loom-run prints its mpirun line on stderr, not stdout.
set -u
cmake=$1 build=$2
p=$(mktemp -d)
trap 'rm -rf "$p"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$cmake" --install "$build" --prefix "$p" > "$p.log" 2>&1 || { cat "$p.log"; rm -f "$p.log"; fail "cmake --install exited non-zero"; }
rm -f "$p.log"
for f in bin/loom bin/loom-run; do [ -x "$p/$f" ] || fail "$f not installed (or not executable)"; done
for f in README.md config.md finetune-data.md architecture.md; do
  [ -s "$p/share/doc/loom/$f" ] || fail "share/doc/loom/$f not installed"
done
v=$(cd / && "$p/bin/loom" --version) || fail "the installed loom --version exited non-zero"
grep -qE '^loom [0-9]+\.[0-9]+\.[0-9]+' <<<"$v" || fail "installed loom --version: '$v'"
echo '{"name": "installed"}' > "$p/job.json"
(cd / && "$p/bin/loom" config show "$p/job.json" | grep -q '"name": "installed"') || fail "the installed loom cannot read a job"
echo "ok: installed in $p: $v"
if command -v mpirun >/dev/null 2>&1; then
  out=$("$p/bin/loom-run" --dry-run -n 2 -- "$p/bin/loom" train "$p/job.json" 2> "$p/err") || fail "loom-run --dry-run exited non-zero"
  [ -z "$out" ] || fail "loom-run printed on stdout: $out"
  grep -q '^loom-run: mpirun -np 2 ' "$p/err" || fail "loom-run's mpirun line is not on stderr: $(cat "$p/err")"
  echo "ok: loom-run's mpirun line on stderr"
fi
