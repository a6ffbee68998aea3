#!/usr/bin/env python3
"""`mha lesson-export` on every shipped lesson (run by ctest as `lesson_export`).

PDF: A4, a title page, one page a step and an answers page when the lesson has a task, each page's
text holding what belongs there (pdfinfo / pdftotext from poppler-utils; without them the pages are
counted from the file's page objects and the text is not read, said on stdout). Markdown: index.md
has every step, every image it references exists and is a whole PNG (signature, chunk CRCs, IEND),
and no figure is left unreferenced. Refusals: an unknown lesson, an --out that names no handout, a
folder of the user's, an unwritable path and a full disk, each exit 2 with the reason, nothing
written.

usage: lesson_export_test.py MHA_BINARY LESSONS_DIR
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

mha, lessons_dir = sys.argv[1], sys.argv[2]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def run(*args):
    return subprocess.run([mha, *args], capture_output=True, text=True, timeout=600)


def squash(s):
    return re.sub(r"\s+", " ", s).strip()


def md_plain(s):  # narration markup as the PDF prints it
    return s.replace("**", "").replace("`", "")


def check_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return "no PNG signature"
    pos, seen = 8, []
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = data[pos + 8 + length:pos + 12 + length]
        if len(body) != length or len(crc) != 4:
            return "chunk %r cut short" % kind
        if struct.unpack(">I", crc)[0] != zlib.crc32(kind + body) & 0xFFFFFFFF:
            return "chunk %r has a bad CRC" % kind
        seen.append(kind)
        pos += 12 + length
    if not seen or seen[0] != b"IHDR" or seen[-1] != b"IEND":
        return "chunks %r: not IHDR ... IEND" % seen
    w, h = struct.unpack(">II", data[16:24])
    if w < 50 or h < 50:
        return "%dx%d is no figure" % (w, h)
    return ""


FIGURE_VIEWS = {"heads", "pipeline", "mask", "reshape", "overview", "token lines", "complexity", "sqrt_dk"}
poppler = shutil.which("pdfinfo") and shutil.which("pdftotext")
if not poppler:
    print("note: pdfinfo/pdftotext (poppler-utils) not found: pages counted from the PDF's objects, "
          "their text not read")

tmp = tempfile.mkdtemp(prefix="lesson-export-")
names = sorted(f[:-5] for f in os.listdir(lessons_dir) if f.endswith(".json"))
if len(names) < 6:
    fail("expected the six shipped lessons in %s, found %r" % (lessons_dir, names))

for name in names:
    with open(os.path.join(lessons_dir, name + ".json"), encoding="utf-8") as f:
        lesson = json.load(f)
    steps = lesson["steps"]
    tasks = [k for k, s in enumerate(steps) if "task" in s]
    expected_pages = 1 + len(steps) + (1 if tasks else 0)

    # --- PDF ---
    pdf = os.path.join(tmp, name + ".pdf")
    r = run("lesson-export", name, "--out", pdf, "-q")
    if r.returncode != 0:
        fail("%s: exit %d: %s" % (name, r.returncode, r.stderr.strip()))
        continue
    if "%d pages" % expected_pages not in r.stdout:
        fail("%s: expected %d pages, the command says %r" % (name, expected_pages, r.stdout.strip()))
    with open(pdf, "rb") as f:
        data = f.read()
    if not data.startswith(b"%PDF-") or b"%%EOF" not in data[-32:]:
        fail("%s: not a whole PDF file (header or %%%%EOF missing)" % name)
    page_objects = len(re.findall(rb"/Type\s*/Page(?![s\w])", data))
    if page_objects != expected_pages:
        fail("%s: %d page objects, expected %d" % (name, page_objects, expected_pages))
    if poppler:
        info = subprocess.run(["pdfinfo", pdf], capture_output=True, text=True)
        if info.returncode != 0:
            fail("%s: pdfinfo refuses the file: %s" % (name, info.stderr.strip()))
            continue
        m = re.search(r"^Pages:\s+(\d+)", info.stdout, re.M)
        if not m or int(m.group(1)) != expected_pages:
            fail("%s: pdfinfo counts %s pages, expected %d" % (name, m and m.group(1), expected_pages))
        if not re.search(r"^Page size:\s+595\.\d+ x 841\.\d+ pts \(A4\)", info.stdout, re.M):
            fail("%s: pages are not A4: %s" % (name, info.stdout))

        def page_text(k):
            t = subprocess.run(["pdftotext", "-f", str(k), "-l", str(k), "-layout", pdf, "-"],
                               capture_output=True, text=True)
            if t.returncode != 0:
                fail("%s: pdftotext cannot read page %d: %s" % (name, k, t.stderr.strip()))
            return squash(t.stdout)

        first = page_text(1)
        if squash(lesson["title"]) not in first:
            fail("%s: page 1 lacks the title %r" % (name, lesson["title"]))
        for k, s in enumerate(steps):
            text = page_text(k + 2)
            for want in [s["title"], "step %d of %d" % (k + 1, len(steps))]:
                if squash(want) not in text:
                    fail("%s: page %d lacks %r: %r" % (name, k + 2, want, text[:300]))
            narration = s["narration"] if isinstance(s["narration"], list) else [s["narration"]]
            words = squash(md_plain(" ".join(narration))).split(" ")
            if squash(" ".join(words[-4:])) not in text:  # the end of the narration: nothing cut off
                fail("%s: page %d lacks the narration's last words %r" % (name, k + 2, words[-4:]))
            if "task" in s and squash(md_plain(s["task"]["instruction"]))[:40] not in text:
                fail("%s: page %d lacks its task" % (name, k + 2))
            # The figures drawn from the view a step leaves shown (their text is the PDF's too): the
            # √d_k plot, the Complexity view's cost bars, the Reshape mistake the step is about, the
            # scores without RoPE.
            tab = None
            for line in s.get("setup", []):
                if line.startswith("tab "):
                    tab = line[4:].strip().lower()
            mistake = None
            for line in s.get("setup", []) + [l for l in s.get("task", {}).get("solution", [])]:
                if line.startswith("set mistake "):
                    mistake = int(line.split()[2])
            wants = {"sqrt_dk": ["softmax of random scores against d_k", "largest weight in a row",
                                 "entropy of a row"],
                     "complexity": ["What one forward costs, stage by stage", "K/V cache"],
                     "reshape": ["reshape of q"] + {1: ["mistake 1: no transpose"],
                                                    2: ["Mistake 2, the merge", "RuntimeError: view size"],
                                                    3: ["Mistake 3"]}.get(mistake, [])}.get(tab, [])
            # A Heads step on the scores without RoPE, or whose task is to choose them: the RoPE figure.
            if tab == "heads" and ("set stage scores_without_rope" in s.get("setup", []) or
                                   s.get("task", {}).get("check", {}).get("stage") == "scores_without_rope"):
                wants = ["scores without and with RoPE", "mean score by distance i - j"]
            for want in wants:
                if squash(want) not in text:
                    fail("%s: page %d lacks its figure's %r" % (name, k + 2, want))
        if tasks:
            last = page_text(expected_pages)
            if "Answers" not in last:
                fail("%s: the last page is not the answers: %r" % (name, last[:200]))
            for k in tasks:
                for line in steps[k]["task"]["solution"]:
                    if squash(line) not in last:
                        fail("%s: the answers lack step %d's solution %r" % (name, k + 1, line))

    # --- Markdown and PNG ---
    folder = os.path.join(tmp, name) + "/"
    r = run("lesson-export", name, "--out", folder, "-q")
    if r.returncode != 0:
        fail("%s (md): exit %d: %s" % (name, r.returncode, r.stderr.strip()))
        continue
    with open(os.path.join(folder, "index.md"), encoding="utf-8") as f:
        md = f.read()
    if not md.startswith("# " + lesson["title"] + "\n"):
        fail("%s: index.md does not start with the title" % name)
    for k, s in enumerate(steps):
        if "## Step %d of %d: %s\n" % (k + 1, len(steps), s["title"]) not in md:
            fail("%s: index.md lacks step %d's heading" % (name, k + 1))
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    # One figure for each step that sets up a view with a figure to draw (the app opens on the
    # Pipeline; `tab` lines change the view), none for the others.
    tab = "pipeline"
    for line in lesson.get("setup", []):
        if line.split()[0] == "tab":
            tab = line.split()[1].lower()
    sections = md.split("\n## ")[1:len(steps) + 1]
    for k, s in enumerate(steps):
        for line in s.get("setup", []):
            if line.split()[0] == "tab":
                tab = line.split()[1].lower()
        want = 1 if s.get("setup") and tab in FIGURE_VIEWS else 0
        got = len(re.findall(r"!\[", sections[k])) if k < len(sections) else -1
        if got != want:
            fail("%s: step %d (view %s) has %d figures, expected %d" % (name, k + 1, tab, got, want))
    for img in images:
        path = os.path.join(folder, img)
        if not os.path.isfile(path):
            fail("%s: index.md references %s, which is not there" % (name, img))
            continue
        why = check_png(path)
        if why:
            fail("%s: %s: %s" % (name, img, why))
    unreferenced = set(os.listdir(folder)) - set(images) - {"index.md"}
    if unreferenced:
        fail("%s: files no one references: %r" % (name, sorted(unreferenced)))
    if tasks and "## Answers" not in md:
        fail("%s: index.md has no answers" % name)
    # Again into the same folder: an earlier handout is replaced.
    r = run("lesson-export", name, "--out", folder, "-q")
    if r.returncode != 0:
        fail("%s (md, again): exit %d: %s" % (name, r.returncode, r.stderr.strip()))
    print("ok %s: %d pages, %d figures" % (name, expected_pages, len(images)))


def refused(args, wants, what):
    r = run(*args)
    if r.returncode != 2:
        fail("%s: exit %d, expected 2 (stderr %r)" % (what, r.returncode, r.stderr))
    for want in wants:
        if want not in r.stderr:
            fail("%s: the error %r does not say %r" % (what, r.stderr.strip(), want))
    return r


out = os.path.join(tmp, "x.pdf")
refused(["lesson-export", "no_such_lesson", "--out", out], ['no lesson "no_such_lesson"', names[0]],
        "an unknown lesson")
if os.path.exists(out):
    fail("an unknown lesson still wrote %s" % out)
refused(["lesson-export", names[0], "--out", os.path.join(tmp, "x.docx")], ["--out", ".pdf"],
        "an --out that is neither a PDF nor a folder")
blocker = os.path.join(tmp, "a_file")
with open(blocker, "w") as f:
    f.write("not a folder")
refused(["lesson-export", names[0], "--out", os.path.join(blocker, "x.pdf"), "-q"], [blocker],
        "an unwritable path")
if shutil.os.path.exists("/dev/full"):
    refused(["lesson-export", names[0], "--format", "pdf", "--out", "/dev/full", "-q"],
            ["/dev/full"], "a full disk")
mine = os.path.join(tmp, "my_notes")
os.makedirs(mine)
with open(os.path.join(mine, "notes.txt"), "w") as f:
    f.write("mine")
refused(["lesson-export", names[0], "--out", mine + "/", "-q"], [mine], "a folder of the user's")
if not os.path.isfile(os.path.join(mine, "notes.txt")):
    fail("the user's folder lost its file")

shutil.rmtree(tmp)
if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("all lessons exported")
