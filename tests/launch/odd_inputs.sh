#!/usr/bin/env bash
# odd_inputs.sh LOOM SRC: inputs an adversarial run tried. parallel.threads far above the cores is
# clamped to them with one warning (it used to spin, under an address-space limit, without a step);
# threads over the node's cores across its ranks warn; a job name that is not UTF-8 is refused; a
# directory given as the job says it is one.
set -u
loom=$1 src=$2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
cores=$(getconf _NPROCESSORS_ONLN)
job=(train "$src/configs/tiny-train.json" --set train.steps=2 --set train.batch_size=4)
# AddressSanitizer reserves terabytes of address space for its shadow, so an ASan build cannot run
# under the limit at all: there the 64 threads run without it (the clamp is still checked)
limit=4000000
ldd "$loom" 2>/dev/null | grep -q libasan && { limit=unlimited; echo "note: an ASan build: no ulimit -v"; }
err=$( (ulimit -v $limit; timeout 120 "$loom" "${job[@]}" --set parallel.threads=64 --out a 2>&1 >/dev/null) ) ||
  { echo "$err" | tail -3; fail "parallel.threads=64 under ulimit -v $limit: exit non-zero (124: it hung)"; }
[ "$cores" -ge 64 ] && { echo "SKIP: $cores cores, 64 threads are not too many here"; exit 77; }
[ "$(grep -c 'parallel.threads' <<<"$err")" = 1 ] || fail "not one warning line for 64 threads: $err"
grep -q "^parallel.threads 64 is more than this node's $cores cores: using $cores threads per rank$" <<<"$err" ||
  fail "64 threads on $cores cores: $err"
grep -q "backend cpu (.*, $cores threads*)" <<<"$err" || fail "the backend does not run $cores threads: $err"
echo "ok: 64 threads clamped to $cores with one warning"
err=$("$loom" "${job[@]}" --set parallel.threads=1 --out b 2>&1 >/dev/null) || fail "parallel.threads=1 failed: $err"
grep -q 'parallel.threads' <<<"$err" && fail "parallel.threads=1 warned: $err"
printf '{"name": "ab\xffc"}\n' > bad_name.json
err=$("$loom" train bad_name.json 2>&1) && fail "a name with byte 0xff accepted"
grep -q "^loom: error: bad_name.json: field 'name' must be UTF-8 text without control characters (it names the run folder): byte 2 is 0xff$" <<<"$err" ||
  fail "non-UTF-8 name: $err"
err=$("$loom" train "$src/configs" 2>&1) && fail "a directory accepted as the job"
grep -q "^loom: error: $src/configs: is a directory, not a job file" <<<"$err" || fail "directory as the job: $err"
echo "ok: a non-UTF-8 name and a directory as the job are one line each"
