#!/usr/bin/env bash
# bench/tokenize.sh [LOOM]: tokenisation speed of a 10 MB text, one thread, loom next to the
# Hugging Face `tokenizers` library (its own Python, parallelism off) on the same text, machine
# and tokenizer.json (the fixtures of tests/fixtures/tokenizers/), and next to the `sentencepiece`
# library on Needle's SentencePiece model (tests/fixtures/needle/needle.model). Needs a quiet machine.
# PYTHON names the Python holding `tokenizers` (default /work/venv/bin/python, else python3).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
loom=${1:-$here/build/launch/loom}
py=${PYTHON:-/work/venv/bin/python}
[ -x "$py" ] || py=$(command -v python3 || true)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 10 MB: the corpus, code and the fixtures' mixed-script text, round-robin
python3 - "$here" "$tmp/text.txt" <<'PY' 2>/dev/null || { cat "$here/configs/data/corpus.txt" > "$tmp/text.txt"; }
import sys, glob
root, out = sys.argv[1], sys.argv[2]
parts = [open(root + "/configs/data/corpus.txt", "rb").read(),
         b"".join(open(f, "rb").read() for f in sorted(glob.glob(root + "/core/*/*.c"))),
         open(root + "/tests/fixtures/tokenizers/text.txt", "rb").read()]
buf = bytearray()
i = 0
while len(buf) < 10_000_000:
    buf += parts[i % 3]; i += 1
open(out, "wb").write(bytes(buf[:10_000_000]))
PY
[ -s "$tmp/text.txt" ] || { echo "bench/tokenize: could not build the text"; exit 1; }
have_ref=0
if [ -n "$py" ] && "$py" -c "import tokenizers" 2>/dev/null; then have_ref=1; fi
printf "%-9s %12s %12s %8s\n" tokenizer "loom MB/s" "HF MB/s" ratio
for fam in gpt2 llama3 qwen2 llama2; do
  tj=$here/tests/fixtures/tokenizers/$fam.json
  l=$(OMP_NUM_THREADS=1 "$loom" tokenize "$tmp/text.txt" "$tmp/out.bin" --width 4 --tokenizer "$tj" 2>&1 |
      sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p')
  h=-
  if [ $have_ref = 1 ]; then
    h=$(TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 "$py" - "$tj" "$tmp/text.txt" <<'PY'
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
tok.encode_special_tokens = True
t0 = time.perf_counter()
raw = open(sys.argv[2], "rb").read()
text = raw.decode("utf-8", errors="replace")
# the library's fast path: the text as a batch of lines (one huge string is ~30x slower in it)
tok.encode_batch(text.splitlines(keepends=True), add_special_tokens=False)
print("%.2f" % (len(raw) / 1e6 / (time.perf_counter() - t0)))
PY
)
  fi
  ratio=-
  [ "$h" != - ] && [ -n "$l" ] && ratio=$(awk -v a="$l" -v b="$h" 'BEGIN { printf "%.2fx", a / b }')
  printf "%-9s %12s %12s %8s\n" "$fam" "${l:-?}" "$h" "$ratio"
done
# SentencePiece: loom tokenize encodes the file in one call; the library gets the lines as one
# batch, its fast path (one call over the whole 10 MB runs at about 2.3 MB/s in it, docs/tokenizers.md)
if [ -n "$py" ] && "$py" -c "import sentencepiece" 2>/dev/null; then have_spm=1; else have_spm=0; fi
sm=$here/tests/fixtures/needle/needle.model
l=$(OMP_NUM_THREADS=1 "$loom" tokenize "$tmp/text.txt" "$tmp/out.bin" --width 4 --tokenizer "$sm" 2>&1 |
    sed -n 's/.*(\([0-9.]*\) MB\/s.*/\1/p')
h=-
if [ $have_spm = 1 ]; then
  h=$("$py" - "$sm" "$tmp/text.txt" <<'PY'
import sys, time
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1], num_threads=1)
t0 = time.perf_counter()
raw = open(sys.argv[2], "rb").read()
text = raw.decode("utf-8", errors="replace")
sp.encode(text.splitlines(keepends=True), num_threads=1)
print("%.2f" % (len(raw) / 1e6 / (time.perf_counter() - t0)))
PY
)
fi
ratio=-
[ "$h" != - ] && [ -n "$l" ] && ratio=$(awk -v a="$l" -v b="$h" 'BEGIN { printf "%.2fx", a / b }')
printf "%-9s %12s %12s %8s   (sentencepiece library in the HF column)\n" needle-spm "${l:-?}" "$h" "$ratio"
if [ $have_ref = 0 ]; then
  echo "reference missing: the tokenizers library; install it with:"
  echo "  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.23.3 && PYTHON=/tmp/tokvenv/bin/python bash bench/tokenize.sh"
fi
