#!/usr/bin/env bash
# truncated_tokens.sh LOOM JOB: a token file whose header promises 1000 tokens but holds 1 must be
# refused with a message naming the file.
set -u
f=$(mktemp --suffix=.bin)
printf 'LOOMTOK1\001\000\000\000\002\000\000\000\350\003\000\000\000\000\000\000ab' > "$f"
"$(dirname "$0")/expect_fail.sh" "$(basename "$f").*truncated" "$1" train "$2" --set data.train="$f" --out cli_out
rc=$?
rm -f "$f"
exit $rc
