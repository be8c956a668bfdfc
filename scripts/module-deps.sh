#!/usr/bin/env bash
# Lists which top-level modules of the engine (src/) use which others (`crate::X` paths and
# `use crate::X`), and reports any cycle between them. Usage: scripts/module-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import os, re, sys
mods = {}
for root, _, files in os.walk("src"):
    for f in files:
        if not f.endswith(".rs") or root == "src/cli" or root.startswith("src/cli/") or f == "main.rs":
            continue
        path = os.path.join(root, f)
        rel = os.path.relpath(path, "src")
        top = rel.split(os.sep)[0].removesuffix(".rs")
        if top == "lib":
            continue
        text = open(path).read()
        # Only code: drop comments (doc links name other modules without importing them).
        code = "\n".join(l.split("//")[0] for l in text.splitlines())
        deps = set(re.findall(r"crate::([a-z_]+)", code))
        mods.setdefault(top, set()).update(d for d in deps if d != top)
for m in sorted(mods):
    print(f"{m:14} -> {', '.join(sorted(mods[m])) or '-'}")
# Cycle check (DFS).
state, stack, cycles = {}, [], []
def visit(m):
    state[m] = 1; stack.append(m)
    for d in sorted(mods.get(m, ())):
        if state.get(d) == 1:
            cycles.append(stack[stack.index(d):] + [d])
        elif d not in state:
            visit(d)
    stack.pop(); state[m] = 2
for m in sorted(mods):
    if m not in state:
        visit(m)
if cycles:
    print("\ncycles:")
    for c in cycles:
        print("  " + " -> ".join(c))
    sys.exit(1)
print("\nno cycles between top-level modules")
PY
