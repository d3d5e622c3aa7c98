#!/usr/bin/env python3
"""Lists the functions longer than 100 lines outside tests (issue #18's target), longest first,
then their count. A brace counter over the Rust sources below DIR (default: harness): it skips
each item marked `#[cfg(test)]` (a test module, a test-only function or impl), `tests/`
folders, `target/` and the fuzz crate, and ignores braces inside string and char literals and
after `//`.

    python3 ci/fn-lengths.py [DIR]
"""
import os
import re
import sys

root_dir = sys.argv[1] if len(sys.argv) > 1 else 'harness'


def code(line):
    """The line without string and char literals and `//` comments."""
    s = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    s = re.sub(r"'(\\.|[^'\\])'", "''", s)
    return s.split('//')[0]


def item_end(lines, i):
    """The index of the last line of the item starting at line i: where its braces close, or
    its `;` when it has none."""
    depth = 0
    started = False
    j = i
    while j < len(lines):
        s = code(lines[j])
        for ch in s:
            if ch == '{':
                depth += 1
                started = True
            elif ch == '}':
                depth -= 1
        if started and depth == 0:
            return j, True
        if not started and s.rstrip().endswith(';'):
            return j, False
        j += 1
    return j, started

res=[]
for root,_,files in os.walk(root_dir):
    if '/target' in root or '/tests' in root or 'fuzz' in root: continue
    for f in files:
        if not f.endswith('.rs'): continue
        p=os.path.join(root,f); lines=open(p).read().split('\n')
        i=0
        while i<len(lines):
            l=lines[i]
            if re.match(r'\s*#\[cfg\(test\)\]',l):
                # Skip the attributes and comments after it, then the item it marks.
                k=i+1
                while k<len(lines) and re.match(r'\s*(#\[|//|$)',lines[k]): k+=1
                i=item_end(lines,k)[0]+1
                continue
            m=re.match(r'\s*(pub(\([a-z]+\))?\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)',l)
            if m:
                j,started=item_end(lines,i)
                n=j-i+1
                if n>100: res.append((n,p,m.group(5),i+1))
                i=j+1 if started else i+1
                continue
            i+=1
for r in sorted(res,reverse=True): print(*r)
print(len(res))
