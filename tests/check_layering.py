#!/usr/bin/env python3
"""The folders' layering, from their #include lines (run by ctest as `layering`).

- engine/ includes nothing from studio/, app/, export/, render/, platform/;
- render/ only the engine; export/ only engine/ and render/; studio/ nothing from app/ or export/;
- studio/ includes no ImGui, GLFW or GL header; no GL header outside app/ and engine/gpu/;
- no two folders depend on each other.

A quoted include is resolved as the compiler does: next to the including file first, then in each
folder on the include path (engine, render, export, studio, platform, app).
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
folders = ["engine", "render", "export", "studio", "platform", "app"]
include_dirs = ["engine", "render", "export", "studio", "platform", "app"]
allowed = {  # folder -> folders it may include from
    "engine": set(),
    "render": set(),
    "export": {"engine", "render"},
    "platform": {"engine"},
    "studio": {"engine", "render", "platform"},
    "app": {"engine", "render", "export", "studio", "platform"},
}
gui_headers = re.compile(r"^(imgui|GLFW/|epoxy/|GL/|EGL/|backends/imgui)")
include_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def folder_of(path):
    rel = os.path.relpath(path, root)
    return rel.split(os.sep)[0]


def resolve(src, name):
    here = os.path.join(os.path.dirname(src), name)
    if os.path.exists(here):
        return here
    for d in include_dirs:
        p = os.path.join(root, d, name)
        if os.path.exists(p):
            return p
    return None


errors = []
edges = {}
for top in folders:
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for f in files:
            if not f.endswith((".cpp", ".hpp", ".h")):
                continue
            src = os.path.join(dirpath, f)
            rel = os.path.relpath(src, root)
            text = open(src, encoding="utf-8", errors="replace").read()
            for kind, name in include_re.findall(text):
                in_gpu = rel.startswith(os.path.join("engine", "gpu"))
                if kind == "<" and gui_headers.match(name):
                    if top == "studio" or (top != "app" and not in_gpu):
                        errors.append(f"{rel}: includes <{name}> (GUI/GL headers live in app/ and engine/gpu/)")
                    continue
                if kind != '"':
                    continue
                target = resolve(src, name)
                if target is None:
                    continue  # a generated header (the embedded shaders)
                other = folder_of(target)
                if other == top or other not in folders:
                    continue
                edges.setdefault(top, set()).add(other)
                if other not in allowed[top]:
                    errors.append(f'{rel}: includes "{name}" from {other}/ ({top}/ may include only '
                                  f'{", ".join(sorted(allowed[top])) or "itself"})')

for a, outs in edges.items():
    for b in outs:
        if a in edges.get(b, set()):
            errors.append(f"{a}/ and {b}/ include each other")

for e in sorted(set(errors)):
    print("layering:", e)
print(f"layering: {len(edges)} folders with outside includes, {len(set(errors))} violations")
sys.exit(1 if errors else 0)
