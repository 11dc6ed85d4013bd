#!/usr/bin/env bash
# layout.sh SRC BUILD: the code keeps the floors of DESIGN.md. Each subsystem folder has a floor:
# base (0) < backends, parallel, checkpoints (1) < core (2) < launch (3). A file may include
# headers of its own folder or of a lower floor only (the three floor-1 rooms meet in core, never
# directly); and no two source files call each other (from the built libraries' symbol tables:
# a.o uses a symbol b.o defines and b.o one of a.o's), so every module pair runs one way.
# tests/ and bench/ may include anything. Fails listing every edge that breaks this.
set -u
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
build=${2:-$src/build}
cd "$src" || exit 1
floor() {
  case $1 in
    base) echo 0 ;; backends | parallel | checkpoints) echo 1 ;; core) echo 2 ;; launch) echo 3 ;;
    *) echo -1 ;;
  esac
}
bad=0 edges=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for dir in base backends parallel checkpoints core launch; do
  [ -d "$dir" ] || continue
  while IFS= read -r f; do
    # "folder/...h" includes only (system headers and same-folder relative includes are fine)
    grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]+"' "$f" | sed -E 's/.*"([^"]+)"/\1/' |
      while IFS= read -r inc; do
        case $inc in */*) ;; *) inc="$(dirname "$f")/$inc" ;; esac
        inc=${inc#./}
        top=${inc%%/*}
        fl=$(floor "$top")
        [ "$fl" -ge 0 ] || continue
        echo "${f%.*} ${inc%.*}" >>"$tmp"
        mine=$(floor "$dir")
        if [ "$top" != "$dir" ] && [ "$fl" -ge "$mine" ]; then
          echo "FAIL: $f (floor $mine, $dir/) includes $inc (floor $fl, $top/)"
          echo x >>"$tmp.bad"
        fi
      done
  done < <(find "$dir" -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.m' | sort)
done
[ -f "$tmp.bad" ] && bad=$(wc -l <"$tmp.bad") && rm -f "$tmp.bad"
# two-file call cycles, from the symbols of loom's libraries (the production ones, not tests'):
# "lib:file.o: U sym" uses, "lib:file.o: ADDR T sym" definitions
libs=$(find "$build/base" "$build/backends" "$build/parallel" "$build/checkpoints" "$build/core" \
         -name 'libloom_*.a' 2>/dev/null)
[ -n "$libs" ] || { echo "FAIL: no libloom_*.a under $build (build first)"; exit 1; }
# shellcheck disable=SC2086
nm -A $libs 2>/dev/null | awk '
  NF != 3 { next }
  { split($1, parts, ":"); obj = parts[2] } # "lib.a:file.o:" or "lib.a:file.o:ADDRESS"
  $2 == "U" { use[obj " " $3] = 1; next }
  $2 ~ /^[TDBR]$/ { def[$3] = obj }
  END {
    for (k in use) { split(k, p, " "); if ((p[2] in def) && def[p[2]] != p[1]) dep[p[1] " " def[p[2]]] = p[2] }
    for (k in dep) { split(k, p, " "); r = p[2] " " p[1]; if ((r in dep) && p[1] < p[2]) print p[1], p[2], dep[k], dep[r] }
  }' >"$tmp.cyc"
while read -r a b sa sb; do
  echo "FAIL: $a and $b call each other ($a uses $sa, $b uses $sb)"
  bad=$((bad + 1))
done <"$tmp.cyc"
rm -f "$tmp.cyc"
edges=$(sort -u "$tmp" | wc -l)
if [ "$bad" -gt 0 ]; then
  echo "layout: $bad broken edge(s) among $edges"
  exit 1
fi
echo "layout: $edges include edges, none upward; no two files call each other"
