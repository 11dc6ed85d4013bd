#!/usr/bin/env bash
# chat_date.sh LOOM: the date Llama 3's template writes (data.date_string) is the job's start date
# unless set, and the checkpoint's job config keeps it: a resume without the field renders with the
# saved date (not today's), one that sets another date is refused naming the field.
LOOM=$1; shift
CMP=
source "$(dirname "$0")/../../checkpoints/resume_lib.sh" || { echo "FAIL: cannot read resume_lib.sh"; exit 1; }
work chat_date
# the data.date_string saved in the job config of DIR's latest checkpoint
saved_date() { h5dump -a /job_config "$(latest "$1")" | grep -o 'date_string\\*": *\\*"[^"\\]*' | sed 's/.*"//'; }
train 1 A --set train.steps=2 --set checkpoint.every=1
today=$(date +"%d %b %Y")
[ "$(saved_date A)" = "$today" ] || fail "a job without data.date_string saved '$(saved_date A)', want today's '$today'"
train 1 B --set train.steps=2 --set checkpoint.every=1 --set 'data.date_string=01 Feb 2025'
train 1 B --set train.steps=3 --set checkpoint.every=1 --resume B/ckpt
[ "$(saved_date B)" = "01 Feb 2025" ] || fail "resumed without the field: saved '$(saved_date B)', want the checkpoint's '01 Feb 2025'"
err=$(loom_np 1 train "$TINY" --out B "${BASE[@]}" --set train.steps=4 --resume B/ckpt --set 'data.date_string=02 Mar 2025' 2>&1) &&
  fail "a resume with another data.date_string was accepted"
grep -q 'data.date_string changed since the checkpoint ("01 Feb 2025" -> "02 Mar 2025")' <<<"$err" || fail "refusal: $err"
echo "ok: today's date by default, kept through a resume, another one refused"
