#!/usr/bin/env bash
# layout.sh [SRC]: the code keeps the floors of docs/architecture.md, read from the sources (so the
# Metal files count too, on any machine). Rooms and floors, low to high:
#   base (0) < backends, backends/{cpu,cuda,metal}, parallel, checkpoints (1)
#   < core/config (2) < core/text (3) < core/model (4) < core/train (5) < launch (6)
# 1. A file includes headers of its own room or of a lower floor only; rooms of one floor never
#    include each other (backends/ and its sub-rooms count as one family: the registry includes
#    each backend's header, each backend the door).
# 2. From another room, a room is entered through its door only: backends/backend.h,
#    parallel/comm.h, checkpoints/ckpt.h, checkpoints/hf.h, checkpoints/needle.h or checkpoints/gguf.h,
#    core/config/config.h,
#    core/text/text.h, core/model/model.h, core/train/train.h (base/ headers are all doors).
# 3. No two source files call each other: a file's external functions (defined at column 0, not
#    static) used by another file give an edge; an edge both ways is a cycle.
# tests/ and bench/ may include anything. Fails listing every edge that breaks a rule.
set -u
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 1
room() { # room of a path
  local p=$1 top=${1%%/*} rest
  rest=${p#*/}
  case $top in
    core) echo "core/${rest%%/*}" ;;
    backends) case $rest in */*) echo "backends/${rest%%/*}" ;; *) echo backends ;; esac ;;
    *) echo "$top" ;;
  esac
}
floor() {
  case $1 in
    base) echo 0 ;; backends | backends/* | parallel | checkpoints) echo 1 ;;
    core/config) echo 2 ;; core/text) echo 3 ;; core/model) echo 4 ;; core/train) echo 5 ;;
    launch) echo 6 ;; *) echo -1 ;;
  esac
}
is_door() {
  case $1 in
    base/*.h | backends/backend.h | parallel/comm.h | checkpoints/ckpt.h | checkpoints/hf.h | checkpoints/needle.h | checkpoints/gguf.h) return 0 ;;
    core/config/config.h | core/text/text.h | core/model/model.h | core/train/train.h) return 0 ;;
  esac
  return 1
}
dirs="base backends parallel checkpoints core launch"
bad=0 edges=0
fail() { echo "FAIL: $*"; bad=$((bad + 1)); }
# shellcheck disable=SC2086
sources=$(find $dirs \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.m' \
                        -o -name '*.metal' \) 2>/dev/null | sort)
for f in $sources; do
  mine=$(room "$f")
  myfloor=$(floor "$mine")
  while IFS= read -r inc; do
    [ -n "$inc" ] || continue
    case $inc in */*) ;; *) inc="$(dirname "$f")/$inc" ;; esac
    inc=${inc#./}
    theirs=$(room "$inc")
    fl=$(floor "$theirs")
    [ "$fl" -ge 0 ] || continue
    edges=$((edges + 1))
    [ "$theirs" = "$mine" ] && continue
    case "$mine $theirs" in backends*" "backends*) continue ;; esac
    if [ "$fl" -ge "$myfloor" ]; then
      fail "$f ($mine, floor $myfloor) includes $inc ($theirs, floor $fl)"
    elif ! is_door "$inc"; then
      fail "$f ($mine) includes $inc, behind the door of $theirs"
    fi
  done < <(grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]+"' "$f" | sed -E 's/.*"([^"]+)"/\1/')
done

# Call cycles between two files. Each source file, comments and strings stripped, gives
# "D name" for an external function it defines, "S name" for a static one, "U name" for every
# identifier it mentions (a call or a function pointer taken); an identifier a file defines itself
# is its own, never an edge.
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2086
for f in $(find $dirs \( -name '*.c' -o -name '*.cu' -o -name '*.m' -o -name '*.cpp' \) 2>/dev/null | sort); do
  awk -v file="$f" '
    { line = $0
      out = ""
      while (length(line) > 0) {
        if (incomment) {
          e = index(line, "*/"); if (!e) { line = ""; break }
          line = substr(line, e + 2); incomment = 0; continue
        }
        c = index(line, "/*"); d = index(line, "//"); q = index(line, "\"")
        n = 0
        if (c && (!n || c < n)) n = c
        if (d && (!n || d < n)) n = d
        if (q && (!n || q < n)) n = q
        if (!n) { out = out line; line = ""; break }
        out = out substr(line, 1, n - 1)
        if (n == c) { incomment = 1; line = substr(line, n + 2) }
        else if (n == d) { line = "" }
        else { rest = substr(line, n + 1)
               line = match(rest, /^([^"\\]|\\.)*"/) ? substr(rest, RLENGTH + 1) : ""
               out = out "\"\"" }
      }
      if (out ~ /^[A-Za-z_]/ && out !~ /^(typedef|extern|return|struct [A-Za-z_0-9]+ *\{|enum|union)/ &&
          out !~ /;[[:space:]]*$/ && match(out, /[A-Za-z_][A-Za-z_0-9]*[[:space:]]*\(/)) {
        pre = substr(out, 1, RSTART - 1)
        name = substr(out, RSTART, RLENGTH); sub(/[[:space:]]*\($/, "", name)
        if (pre !~ /=/ && pre ~ /[A-Za-z_*][[:space:]*]*$/) print ((out ~ /^static/) ? "S " : "D ") name
      }
      s = out
      while (match(s, /[A-Za-z_][A-Za-z_0-9]*/)) { print "U " substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH) }
    }' "$f" | sort -u | sed "s|^|$f |" >>"$tmp"
done
cycles=$(awk '
  $2 == "D" { def[$3] = $1 }
  $2 != "U" { own[$1 " " $3] = 1 }
  $2 == "U" { use[$1 " " $3] = 1 }
  END {
    for (k in use) { split(k, p, " "); if ((p[2] in def) && def[p[2]] != p[1] && !((p[1] " " p[2]) in own)) dep[p[1] " " def[p[2]]] = p[2] }
    for (k in dep) { split(k, p, " "); r = p[2] " " p[1]; if ((r in dep) && p[1] < p[2]) print p[1], p[2], dep[k], dep[r] }
  }' "$tmp")
while read -r a b sa sb; do
  [ -n "$a" ] || continue
  fail "$a and $b call each other ($a uses $sa, $b uses $sb)"
done <<<"$cycles"
if [ "$bad" -gt 0 ]; then
  echo "layout: $bad broken rule(s) among $edges include edges"
  exit 1
fi
echo "layout: $edges include edges, none upward, every room entered by its door; no two files call each other"
