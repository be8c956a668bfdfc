#!/usr/bin/env bash
# Lists which top-level modules of the engine (src/) use which others (`crate::X` paths and
# `use crate::X`), prints them in layers (a module's layer is one above the highest layer it
# imports; layer 0 imports nothing of the crate), and fails (exit 1) on any cycle, or when the
# layout sections of src/lib.rs and README.md do not list every module in the layer printed
# here. Then the same inside the modules named in INNER (src/config): its files' imports of
# each other (`super::x`, `crate::config::x`, a name resolved through mod.rs's `pub use` to the
# file that defines it; unit tests left out) must form no cycle either.
# Usage: scripts/module-deps.sh
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
for m in mods:
    mods[m] &= set(mods)  # `crate::X` of an inline module of lib.rs (`http_client`) is not a part
for m in sorted(mods):
    print(f"{m:14} -> {', '.join(sorted(mods[m])) or '-'}")
# Cycle check (DFS: the graph has a cycle exactly when the search meets a back edge).
def find_cycles(graph):
    state, stack, cycles = {}, [], []
    def visit(m):
        state[m] = 1; stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop(); state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles
cycles = find_cycles(mods)
if cycles:
    print("\ncycles:")
    for c in cycles:
        print("  " + " -> ".join(c))
    sys.exit(1)
print("\nno cycles between top-level modules")

# Layers: the longest import chain below each module.
layer = {}
def depth(m):
    if m not in layer:
        layer[m] = 1 + max((depth(d) for d in mods[m]), default=-1)
    return layer[m]
for m in mods:
    depth(m)
print("\nlayers (each imports only from layers below it):")
for n in range(max(layer.values()) + 1):
    print(f"  {n}: {', '.join(sorted(m for m in mods if layer[m] == n))}")

# The maps in the docs must say the same. In a layout section, a line starting with
# "layer N" (any case, after list markers and emphasis) opens layer N. Each list item under it
# (with its wrapped lines) is split at "; " into clauses, and a clause names its module(s) in
# backticks before its ":" or " — " (`cache/`, `status.rs`, [`engine`], `problem.rs` +
# `problem_kind.rs`); a clause whose head is anything else names none.
def documented(path, start, stop):
    lines, inside, items, cur = open(path).read().splitlines(), False, [], None
    rust = path.endswith(".rs")
    for raw in lines:
        line = raw[3:] if raw.startswith("//!") else raw
        if re.match(start, line):
            inside = True
            continue
        if inside and (re.match(stop, line) or (rust and not raw.startswith("//!"))):
            break
        if not inside:
            continue
        bare = line.strip().lstrip("-*").strip().lstrip("*").strip()
        h = re.match(r"(?i)layer (\d+)\b", bare)
        item = re.match(r"(\s*)- (.*)", line)
        if h:
            cur = int(h.group(1))
        elif item and cur is not None:
            items.append([cur, len(item.group(1)), item.group(2)])
        elif items and line.strip() and len(line) - len(line.lstrip()) > items[-1][1]:
            items[-1][2] += " " + line.strip()
    out = {}
    for n, _, text in items:
        for clause in text.split("; "):
            head = re.split(r": | — ", clause)[0]
            names = re.findall(r"`([a-z_]+)(?:/|\.rs)?`", head)
            rest = re.sub(r"\[?`[a-z_]+(?:/|\.rs)?`\]?|[+,\s]|\band\b", "", head)
            if not rest:
                for name in names:
                    out.setdefault(name, n)
    return out
bad = []
for path, start, stop in [("src/lib.rs", r"\s*# Layout", r"\s*# "),
                          ("README.md", r"## Layout", r"## ")]:
    doc = documented(path, start, stop)
    for m in sorted(mods):
        if m not in doc:
            bad.append(f"{path}: `{m}` is not in the layout section (layer {layer[m]})")
        elif doc[m] != layer[m]:
            bad.append(f"{path}: `{m}` is listed in layer {doc[m]}, the graph puts it in layer {layer[m]}")
if bad:
    print("\nthe layout docs do not match the graph:")
    for b in bad:
        print("  " + b)
    sys.exit(1)
print("\nsrc/lib.rs and README.md list every module in its layer")

# Inside a module: which of its files import which (mod.rs counts for the items it defines and
# the re-exported names its own code uses; its `mod` and `pub use` lines are not imports).
INNER = ["config"]
def inner_graph(d):
    files = {f[:-3]: os.path.join(d, f) for f in os.listdir(d) if f.endswith(".rs")}
    code = {}
    for name, path in files.items():
        text = open(path).read()
        # The unit tests at the end of a file import what they test (`use super::*`): not the
        # file's own dependencies.
        text = re.split(r"\n#\[cfg\((?:all\()?test\b[^\]]*\]\s*\nmod tests", text)[0]
        code[name] = "\n".join(l.split("//")[0] for l in text.splitlines())
    item = r"^\s*pub(?:\([^)]*\))?\s+(?:async\s+)?(?:struct|enum|fn|const|static|type|trait)\s+(\w+)"
    home = {n: "mod" for n in re.findall(item, code["mod"], re.M)}
    facade = []  # mod.rs's `pub use child::{...}` lines
    for m in re.finditer(r"pub use (\w+)::(\{[^}]*\}|\w+(?: as \w+)?);", code["mod"], re.S):
        child, names = m.group(1), m.group(2)
        facade.append(m.group(0))
        if child not in files:
            continue
        for part in names.strip("{}").split(","):
            part = part.strip()
            if part:
                home[part.split(" as ")[-1].strip()] = child
    deps = {n: set() for n in files}
    def target(first):
        return first if first in files and first != "mod" else home.get(first)
    for n, c in code.items():
        if n == "mod":
            own = c
            for f in facade:
                own = own.replace(f, "")
            own = re.sub(r"^\s*(pub )?mod \w+;", "", own, flags=re.M)
            for name, h in home.items():
                if h != "mod" and re.search(rf"\b{name}\b", own):
                    deps[n].add(h)
            deps[n].update(f for f in re.findall(r"\b(\w+)::", own) if f in files and f != "mod")
            continue
        for m in re.finditer(r"(?:\bsuper|crate::config)::(\{[^}]*\}|\w+)", c):
            group = m.group(1)
            firsts = [p.strip().split("::")[0] for p in group.strip("{}").split(",")] if group.startswith("{") else [group]
            for first in firsts:
                t = target(first.split(" as ")[0].strip())
                if t and t != n:
                    deps[n].add(t)
    return deps
for inner in INNER:
    files = inner_graph(os.path.join("src", inner))
    print(f"\nfiles of src/{inner}:")
    for f in sorted(files):
        print(f"  {f:16} -> {', '.join(sorted(files[f])) or '-'}")
    cycles = find_cycles(files)
    if cycles:
        print(f"\ncycles between the files of src/{inner}:")
        for c in cycles:
            print("  " + " -> ".join(c))
        sys.exit(1)
    print(f"no cycles between the files of src/{inner}")
PY
