"""Module circles inside a crate: `scripts/module-circles.py crates/NAME/src`.

Builds the crate's module graph from `crate::a::b` paths (use lines and
inline paths), `super::` references and a parent's `child::` paths, leaving
out `#[cfg(test)] mod tests`; prints the strongly connected components of
more than one module and exits 1 when there is any. A module is named by its
file path (mod.rs: its folder); an edge a -> b means a names an item of b
(the deepest module of the path that exists). Run by scripts/test.sh on the
crates docs/architecture.md says must have no circle."""
import os, re, sys
root = sys.argv[1]
mods = {}
for dp, _, fs in os.walk(root):
    for f in fs:
        if f.endswith('.rs'):
            rel = os.path.relpath(os.path.join(dp, f), root)[:-3]
            if rel.endswith('/mod'): rel = rel[:-4]
            if rel in ('lib', 'main'): rel = ''
            mods[rel.replace('/', '::')] = os.path.join(dp, f)
def strip_tests(s):
    i = s.find('#[cfg(test)]\nmod tests')
    return s if i < 0 else s[:i]
def resolve(path):
    parts = path.split('::')
    for k in range(len(parts), 0, -1):
        cand = '::'.join(parts[:k])
        if cand in mods: return cand
    return ''
edges = {m: set() for m in mods}
for m, f in mods.items():
    s = strip_tests(open(f).read())
    s = re.sub(r'//.*', '', s)
    # expand `use crate::a::{b, c::d}` groups one level
    for g in re.finditer(r'crate::((?:\w+::)*)\{([^}]*)\}', s):
        for item in g.group(2).split(','):
            item = item.strip().split(' as ')[0]
            if item and item != 'self':
                t = resolve(g.group(1) + item)
                if t != m: edges[m].add(t)
            elif item == 'self':
                t = resolve(g.group(1).rstrip(':'))
                if t != m: edges[m].add(t)
    for p in re.finditer(r'crate((?:::\w+)+)', s):
        t = resolve(p.group(1)[2:])
        if t != m: edges[m].add(t)
    parent = m.rsplit('::', 1)[0] if '::' in m else ''
    for g in re.finditer(r'\b((?:super::)+)((?:\w+::)*)\{([^}]*)\}', s):
        base = parent
        for _ in range(g.group(1).count('super::') - 1):
            base = base.rsplit('::', 1)[0] if '::' in base else ''
        for item in g.group(3).split(','):
            item = item.strip().split(' as ')[0]
            if not item: continue
            path = g.group(2) + ('' if item == 'self' else item)
            t = resolve(((base + '::') if base else '') + path.rstrip(':')) if path else base
            if t != m: edges[m].add(t)
    for p in re.finditer(r'\bsuper((?:::\w+)+)', s):
        base = parent
        path = p.group(1)[2:]
        while path.startswith('super::'):
            base = base.rsplit('::', 1)[0] if '::' in base else ''
            path = path[7:]
        t = resolve((base + '::' if base else '') + path)
        if t != m: edges[m].add(t)
# relative paths to a child module: `child::item` (use lines, `pub use`, inline paths)
for m, f in mods.items():
    s_ = re.sub(r'//.*', '', strip_tests(open(f).read()))
    for child in [c for c in mods if c.startswith(m + '::' if m else '') and '::' not in c[len(m) + 2 if m else 0:]]:
        name = child.rsplit('::', 1)[-1]
        if re.search(r'(?<![\w:])' + name + r'::', s_) or re.search(r'\{[^}]*\b' + name + r'::', s_):
            edges[m].add(child)
# a parent declaring `mod child` is not a use edge: drop edges to the crate root from children
for m in edges: edges[m].discard('')
# Tarjan
index = {}; low = {}; stack = []; on = set(); sccs = []; i = [0]
sys.setrecursionlimit(10000)
def strong(v):
    index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index: strong(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = stack.pop(); on.discard(w); c.append(w)
            if w == v: break
        sccs.append(c)
for v in edges:
    if v not in index: strong(v)
cyc = [c for c in sccs if len(c) > 1]
print(f"{len(mods)} modules, {sum(len(e) for e in edges.values())} edges, {len(cyc)} circles")
for c in cyc: print("  circle:", sorted(c))
sys.exit(1 if cyc else 0)
