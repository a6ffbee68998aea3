#!/usr/bin/env python3
"""The folders' layering, from their #include lines (run by ctest as `layering`).

- engine/ includes nothing from studio/, app/, export/, render/, platform/;
- render/ only the engine; export/ only engine/ and render/; studio/ nothing from app/ or export/;
  handout/ (a lesson walked and exported) the libraries below app/;
- tools/mha/ (the CLI) nothing from app/; tests/ and tools/ may include any library folder, and
  nothing outside them includes from tests/ or tools/;
- studio/ includes no ImGui, GLFW or GL header; no GL header outside app/ and engine/gpu/, neither
  directly nor through a header (engine/gpu's public headers stay GL-free; tests/ may include the
  GPU path's internals);
- the folders' dependencies have no cycle, of any length.

Quoted and angled includes are both checked. A quoted include is resolved as the compiler does: next
to the including file first, then in each folder on the include path (engine, render, export,
studio, platform, app, then tests and tools/mha for the tests).
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
libraries = ["engine", "render", "export", "studio", "platform", "handout", "app"]
folders = libraries + ["tools/mha", "tools", "tests"]
include_dirs = libraries + ["tests", "tools/mha"]
allowed = {  # folder -> folders it may include from
    "engine": set(),
    "render": set(),
    "export": {"engine", "render"},
    "platform": {"engine"},
    "studio": {"engine", "render", "platform"},
    "handout": {"engine", "render", "export", "studio", "platform"},
    "app": {"engine", "render", "export", "studio", "platform", "handout"},
    "tools/mha": {"engine", "render", "export", "studio", "platform", "handout"},
    "tools": set(libraries) | {"tests"},  # measurements that reuse the tests' helpers
    "tests": set(libraries) | {"tools/mha"},  # the CLI's argument parser is fuzzed
}
gui_header = re.compile(r"^(imgui|GLFW/|epoxy/|GL/|EGL/|backends/imgui)")
gl_header = re.compile(r"^(GLFW/|epoxy/|GL/|EGL/)")
include_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def folder_of(path):
    parts = os.path.relpath(path, root).split(os.sep)
    if parts[0] == "tools" and len(parts) > 2 and parts[1] == "mha":
        return "tools/mha"
    return parts[0]


def resolve(src, name):
    here = os.path.join(os.path.dirname(src), name)
    if os.path.exists(here):
        return os.path.normpath(here)
    for d in include_dirs:
        p = os.path.join(root, d, name)
        if os.path.exists(p):
            return os.path.normpath(p)
    return None


def rel(path):
    return os.path.relpath(path, root)


# Every source file and what it includes: (kind, name, resolved path or None).
includes = {}
for top in ["engine", "render", "export", "studio", "platform", "app", "tools", "tests"]:
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for f in files:
            if f.endswith((".cpp", ".hpp", ".h")):
                src = os.path.normpath(os.path.join(dirpath, f))
                text = open(src, encoding="utf-8", errors="replace").read()
                includes[src] = [(kind, name, resolve(src, name) if kind == '"' else None)
                                 for kind, name in include_re.findall(text)]

# The chain of headers through which a file brings in a GL header, ending in that header; [] for none.
gl_through = {}


def brings_gl(src, seen=()):
    if src in gl_through:
        return gl_through[src]
    chain = []
    for kind, name, target in includes.get(src, []):
        if target is None and gl_header.match(name):
            chain = [f"<{name}>"]
        elif target is not None and target not in seen:
            inner = brings_gl(target, seen + (src,))
            if inner:
                chain = [rel(target)] + inner
        if chain:
            break
    gl_through[src] = chain
    return chain


def gl_allowed(path):
    r = rel(path).replace(os.sep, "/")
    return r.startswith(("app/", "engine/gpu/", "tests/"))


errors = []
edges = {}
for src, incs in includes.items():
    top = folder_of(src)
    for kind, name, target in incs:
        if target is None:
            # A system or generated header (the embedded shaders); GUI/GL ones only where allowed.
            if gui_header.match(name) and (top == "studio" or not (gl_allowed(src) or top == "tools")):
                shown = f"<{name}>" if kind == "<" else f'"{name}"'
                errors.append(f"{rel(src)}: includes {shown} (GUI/GL headers live in app/ and engine/gpu/)")
            continue
        other = folder_of(target)
        if other not in folders:
            continue
        if other != top:
            edges.setdefault(top, set()).add(other)
            if other not in allowed[top]:
                errors.append(f'{rel(src)}: includes "{name}" from {other}/ ({top}/ may include only '
                              f'{", ".join(sorted(allowed[top])) or "itself"})')
        # A GL header through another header: only app/, engine/gpu/ and tests/ may have one.
        if not gl_allowed(src) and top != "tools":
            chain = brings_gl(target)
            if chain:
                errors.append(f'{rel(src)}: includes "{name}", which brings in {chain[-1]} (through '
                              f'{" -> ".join([rel(target)] + chain[:-1])}); GL types stay in app/ and engine/gpu/')


# Cycles of any length between folders: each strongly connected component of more than one folder.
def components(graph):
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def cycle_in(graph, comp):
    # One cycle through the component's first folder, found by a breadth-first search back to it.
    start, members = comp[0], set(comp)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                return paths[v] + [start]
            if w in members and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return comp


for comp in components(edges):
    if len(comp) > 1:
        errors.append("the folders include each other in a cycle: " + " -> ".join(f"{f}/" for f in cycle_in(edges, comp)))

for e in sorted(set(errors)):
    print("layering:", e)
print(f"layering: {len(includes)} files, {len(edges)} folders with outside includes, {len(set(errors))} violations")
sys.exit(1 if errors else 0)
