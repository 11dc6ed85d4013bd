#!/usr/bin/env python3
"""cu2cpp.py: rewrite a CUDA source so a host C++ compiler builds it against emu/include.

   name<<<grid, block, smem, stream>>>(args);  ->  emu_run(emu_kptr(name), grid, block, smem,
                                                   stream, [&] { name(args); });
   extern __shared__ T x[];                    ->  T *x = (T *)emu_dyn_smem();
   __shared__                                  ->  static   (blocks run one at a time)
   #pragma unroll                              ->  an empty line (nvcc's; g++ warns)
Test-only: used by tests/backends/cuda/emu to run the kernels without a GPU."""
import re
import sys


def match_paren(s, i):
    """s[i] == '(' ; index of the matching ')'."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == '(':
            depth += 1
        elif s[j] == ')':
            depth -= 1
            if depth == 0:
                return j
    raise SystemExit("cu2cpp: unbalanced parentheses")


def rewrite_launches(s):
    out, pos = [], 0
    pat = re.compile(r'([A-Za-z_][A-Za-z0-9_]*(?:\s*<[^<>;]*>)?)\s*<<<')
    while True:
        m = pat.search(s, pos)
        if not m:
            out.append(s[pos:])
            return ''.join(out)
        name = m.group(1)
        end_cfg = s.index('>>>', m.end())
        cfg = s[m.end():end_cfg]
        parts = [p.strip() for p in split_top(cfg)]
        while len(parts) < 4:
            parts.append('0')
        k = end_cfg + 3
        while s[k].isspace():
            k += 1
        if s[k] != '(':
            raise SystemExit("cu2cpp: launch of %s without arguments" % name)
        close = match_paren(s, k)
        args = s[k + 1:close]
        out.append(s[pos:m.start()])
        out.append('emu_run(emu_kptr(%s), dim3(%s), dim3(%s), %s, %s, [&] { %s(%s); })' %
                   (name, parts[0], parts[1], parts[2], parts[3], name, args))
        pos = close + 1


def split_top(s):
    """Split on commas outside parentheses/brackets."""
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    return parts


def main():
    src = open(sys.argv[1]).read()
    src = re.sub(r'extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][A-Za-z0-9_]*)\s+'
                 r'([A-Za-z_][A-Za-z0-9_]*)\s*\[\s*\]\s*;',
                 r'\1 *\2 = (\1 *)emu_dyn_smem();', src)
    src = re.sub(r'\b__shared__\b', 'static', src)
    src = re.sub(r'^[ \t]*#pragma unroll[^\n]*$', '', src, flags=re.M)  # lines kept: #line stays right
    src = rewrite_launches(src)
    with open(sys.argv[2], 'w') as f:
        f.write('#line 1 "%s"\n' % sys.argv[1])
        f.write(src)


main()
