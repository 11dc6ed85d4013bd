#!/usr/bin/env bash
# job_paths.sh LOOM SRC: one rule for a job's paths (docs/config.md, "Paths"): a relative path in the
# job file is taken from the file's folder even when the same name exists in the current directory;
# one given by --set from the current directory; a missing input names the field and the resolved path.
set -u
loom=$1 src=$2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
mkdir jobs
cp "$src/configs/data/corpus.txt" jobs/corpus.txt
echo "too short" > corpus.txt # the same name here: a job file's path must not pick it
printf '{"name": "p", "out": "out", "data": {"train": "corpus.txt"}, "train": {"steps": 1, "batch_size": 8}, "parallel": {"threads": 1}}\n' > jobs/job.json
"$loom" train jobs/job.json --quiet > log 2>&1 || { cat log; fail "train jobs/job.json exited non-zero"; }
[ -s jobs/out/metrics.jsonl ] || fail "out \"out\" in jobs/job.json did not land in jobs/out"
[ ! -e out ] || fail "out \"out\" in jobs/job.json was taken from the current directory"
echo "ok: data.train and out of the job file taken from its folder"
err=$("$loom" train jobs/job.json --set data.train=corpus.txt --out o2 2>&1) && fail "--set data.train=corpus.txt (too short, here) accepted"
grep -q "corpus.txt: .* tokens, need more than train.seq_len" <<<"$err" || fail "--set data.train is not from the current directory: $err"
echo "ok: --set data.train taken from the current directory"
printf '{"data": {"train": "nope.txt"}}\n' > jobs/missing.json
err=$("$loom" train jobs/missing.json --out o3 2>&1) && fail "a missing data.train accepted"
grep -q "^loom: error: data.train: jobs/nope.txt: No such file or directory" <<<"$err" ||
  fail "a missing data.train does not name the field and the resolved path: $err"
cp "$src/configs/data/tools.jsonl" jobs/tools.jsonl
printf '{"finetune": {"base": "../nowhere/ckpt"}, "model": {"max_seq": 256}, "data": {"train": "tools.jsonl", "max_len": 256}, "parallel": {"threads": 1}}\n' > jobs/ft.json
err=$("$loom" finetune jobs/ft.json --out o4 2>&1) && fail "a missing finetune.base accepted"
grep -q "^loom: error: finetune.base: jobs/../nowhere/ckpt: no such checkpoint file or directory" <<<"$err" ||
  fail "a missing finetune.base does not name the field and the resolved path: $err"
echo "ok: a missing input names the field and the path as resolved"
