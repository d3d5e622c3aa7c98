#!/usr/bin/env python3
"""Lists the functions longer than 100 lines outside tests (issue #18's target), longest first,
then their count. A brace counter over the Rust sources below DIR (default: harness): it skips
`#[cfg(test)]` modules (everything after the attribute in a file), `tests/` folders, `target/`
and the fuzz crate, and ignores braces inside string and char literals and after `//`.

    python3 ci/fn-lengths.py [DIR]
"""
import os
import re
import sys

root_dir = sys.argv[1] if len(sys.argv) > 1 else 'harness'
res=[]
for root,_,files in os.walk(root_dir):
    if '/target' in root or '/tests' in root or 'fuzz' in root: continue
    for f in files:
        if not f.endswith('.rs'): continue
        p=os.path.join(root,f); lines=open(p).read().split('\n')
        in_test=False
        i=0
        while i<len(lines):
            l=lines[i]
            if re.match(r'\s*#\[cfg\(test\)\]',l): break
            m=re.match(r'\s*(pub(\([a-z]+\))?\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)',l)
            if m:
                depth=0; started=False; j=i
                while j<len(lines):
                    s=re.sub(r'"(\\.|[^"\\])*"','""',lines[j]); s=re.sub(r"'(\\.|[^'\\])'","''",s); s=s.split('//')[0]
                    for ch in s:
                        if ch=='{': depth+=1; started=True
                        elif ch=='}': depth-=1
                    if started and depth==0: break
                    if not started and s.rstrip().endswith(';'): break
                    j+=1
                n=j-i+1
                if n>100: res.append((n,p,m.group(5),i+1))
                i=j+1 if started else i+1
                continue
            i+=1
for r in sorted(res,reverse=True): print(*r)
print(len(res))
