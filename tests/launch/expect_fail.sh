#!/usr/bin/env bash
# expect_fail.sh PATTERN CMD...: CMD must exit non-zero, print one "loom: error:" line on stderr
# matching PATTERN (grep -E), and not crash (no signal exit). Used for every bad-input test.
set -u
pattern=$1; shift
err=$(mktemp)
"$@" >/dev/null 2>"$err"
rc=$?
if [ $rc -eq 0 ]; then echo "FAIL: exit 0 for: $*"; cat "$err"; exit 1; fi
if [ $rc -ge 128 ]; then echo "FAIL: killed by signal $((rc-128)): $*"; cat "$err"; exit 1; fi
if ! grep -qE "loom: error: .*$pattern" "$err"; then
  echo "FAIL: no 'loom: error:' line matching /$pattern/ for: $*"; cat "$err"; exit 1
fi
echo "ok (exit $rc): $(grep -m1 'loom: error' "$err")"
rm -f "$err"
