# bench/needle_lib.sh: what bench/needle.sh and bench/needle_decode.sh share (sourced, not run).
# The caller sets build, bench (its binary) and base; this sets root, py (PYTHON, else
# /work/venv/bin/python if present, else python3), field and cpu, and stops with the command that
# installs what is missing: the binary, Needle's package. Makes the base (Needle's default config,
# random init, by bench/needle_step.py) when it is not there.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${PYTHON:-}" ]; then py=$PYTHON
elif [ -x /work/venv/bin/python ]; then py=/work/venv/bin/python
else py=python3; fi
[ -x "$bench" ] || { echo "$(basename "$bench"): not built (cmake --build $build --target $(basename "$bench"))"; exit 1; }
if ! "$py" -c "import needle.model.architecture, optax" 2> /dev/null; then
  echo "Needle reference: missing ($py lacks cactus-needle[train]); install with:"
  echo "  python3 -m venv /work/venv && /work/venv/bin/pip install 'cactus-needle[train]==3.2.8'"
  exit 1
fi
[ -f "$base" ] || { echo "making $base (Needle's default config, random init)"; "$py" "$root/bench/needle_step.py" "$base" 1 8 1 > /dev/null; }
field() { sed -n "s/.*\"$1\": \([-0-9.e]*\).*/\1/p"; }
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
