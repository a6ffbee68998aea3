"""`mha check` on every student file in tests/check/: each gets the verdict its header expects.

    python3 tests/check_students.py MHA SOURCE_DIR OUT_DIR

A file's first lines say what it should get:
    # expect: correct keep                      exit 0, that mask convention
    # expect: mistakes ID [ID]                  exit 1, exactly these mistake ids
    # expect: unknown                           exit 1
    # expect: error STAGE [TYPE]                exit 2, the Python error's stage (and type), with its line
    # expect: timeout                           exit 2, stopped (run with --timeout 5)
    # expect with --map A=q,...: correct keep   the same file again with those options
Then `mha check --scenario PRESET --emit-test` for some presets: the written test passes in torch.

Exit 0: all as expected; 1: some differ; 77: torch or numpy is missing (skipped).
"""
import glob
import json
import os
import subprocess
import sys
import time

try:
    import numpy  # noqa: F401
    import torch  # noqa: F401
except ImportError as e:  # ctest SKIP_RETURN_CODE
    print(f"skipped: {e} (bash tools/install_deps.sh --torch installs Debian's python3-torch)")
    sys.exit(77)

mha, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
failures = []


def expectations(path):
    """[(extra arguments, expectation words)] from the file's header."""
    found = []
    for line in open(path):
        if not line.startswith("# expect"):
            break
        head, _, want = line[1:].partition(":")
        extra = head.split("with", 1)[1].split() if "with" in head else []
        found.append((extra, want.split()))
    return found


def check(path, extra, want):
    name = os.path.basename(path)
    args = [mha, "check", path, "--json"] + extra + (["--timeout", "5"] if want[0] == "timeout" else [])
    started = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True)
    took = time.monotonic() - started
    label = f"{name} {' '.join(extra)}".strip()
    try:
        got = json.loads(p.stdout)
    except json.JSONDecodeError:
        return f"{label}: no JSON (exit {p.returncode}): {p.stdout}{p.stderr}"
    kind, rest = want[0], want[1:]
    problems = []
    if kind == "correct":
        if p.returncode != 0 or got["verdict"] != "correct":
            problems.append(f"expected correct, got exit {p.returncode} {got['verdict']} {got['mistakes']}")
        if rest and got["mask_convention"] != rest[0]:
            problems.append(f"expected mask convention {rest[0]}, got {got['mask_convention']}")
    elif kind == "mistakes":
        if p.returncode != 1 or got["verdict"] != "mistakes" or sorted(got["mistakes"]) != sorted(rest):
            problems.append(f"expected mistakes {rest}, got exit {p.returncode} {got['verdict']} {got['mistakes']}")
    elif kind == "unknown":
        if p.returncode != 1 or got["verdict"] != "unknown":
            problems.append(f"expected unknown, got exit {p.returncode} {got['verdict']} {got['mistakes']}")
    elif kind == "error":
        e = got.get("error") or {}
        if p.returncode != 2 or e.get("stage") != rest[0] or (len(rest) > 1 and e.get("type") != rest[1]):
            problems.append(f"expected error {rest}, got exit {p.returncode} {e}")
        if rest[0] in ("import", "construct", "forward") and (not e.get("file", "").endswith(name) or e.get("line", 0) <= 0):
            problems.append(f"the error does not name the file and line: {e}")
        if rest[0] == "weights" and "--map A=q,B=k,C=v,D=o" not in e.get("message", ""):
            problems.append(f"the error does not suggest the --map: {e}")
        if rest[0] == "forward" and not e.get("case"):
            problems.append(f"the error does not name the case: {e}")
    elif kind == "timeout":
        e = got.get("error") or {}
        if p.returncode != 2 or e.get("kind") != "timeout" or "stopped after 5 s" not in e.get("message", ""):
            problems.append(f"expected a timeout, got exit {p.returncode} {e}")
    print(f"{'ok  ' if not problems else 'FAIL'} {label}: exit {p.returncode}, {got['verdict']} "
          f"{' '.join(got['mistakes'])} ({took:.2f} s)")
    return "; ".join(f"{label}: {x}" for x in problems) or None


for path in sorted(glob.glob(os.path.join(src, "tests", "check", "*.py"))):
    for extra, want in expectations(path):
        problem = check(path, extra, want)
        if problem:
            failures.append(problem)

# The human-readable report names the mistake and its fix.
p = subprocess.run([mha, "check", os.path.join(src, "tests", "check", "mistake_no_scale.py")],
                   capture_output=True, text=True)
if p.returncode != 1 or "no_scale" not in p.stdout or "fix:" not in p.stdout or "✗" not in p.stdout:
    failures.append(f"text report of mistake_no_scale.py: exit {p.returncode}\n{p.stdout}{p.stderr}")

# Copy as PyTorch: the emitted test runs in torch and passes.
for preset in ["course_notebook", "padded_batch", "cross_attention", "causal_lm", "model_first_token"]:
    scenario = os.path.join(src, "assets", "presets", preset + ".json")
    test = os.path.join(out, f"test_{preset}.py")
    p = subprocess.run([mha, "check", "--scenario", scenario, "--emit-test", test], capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"--emit-test {preset}: exit {p.returncode}: {p.stderr}")
        continue
    p = subprocess.run([sys.executable, test], capture_output=True, text=True)
    print(f"{'ok  ' if p.returncode == 0 else 'FAIL'} emitted test {preset}: {p.stdout.strip()}")
    if p.returncode != 0:
        failures.append(f"emitted test {preset} fails in torch: {p.stdout}{p.stderr}")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
