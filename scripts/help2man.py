#!/usr/bin/env python3
"""A man page (roff) from `weft [COMMAND] --help`, so the pages say exactly what --help says.
Run at build time by meson (one page per command); no package beyond Python itself.
usage: help2man.py WEFT_BINARY COMMAND|- VERSION OUT.1"""
import re
import subprocess
import sys

weft, cmd, version, out = sys.argv[1:5]
args = [weft, "--help"] if cmd == "-" else [weft, cmd, "--help"]
text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
name = "weft" if cmd == "-" else "weft-" + cmd


def esc(s):
    s = s.replace("\\", "\\e")
    return re.sub(r"^([.'])", r"\\&\1", s, flags=re.M).replace("-", "\\-")


lines = text.rstrip("\n").split("\n")
usage, body = [], []
i = 0
while i < len(lines) and (lines[i].startswith("usage:") or (usage and lines[i].startswith(" "))):
    usage.append(lines[i].replace("usage: ", "", 1).strip())
    i += 1
body = lines[i:]
summary = ""
for line in body:
    if line.strip():
        summary = line.strip().rstrip(".")
        break
page = [".TH %s 1 \"\" \"weft %s\" \"weft manual\"" % (name.upper(), version),
        ".SH NAME", "%s \\- %s" % (esc(name), esc(summary[:100])), ".SH SYNOPSIS"]
for u in usage:
    page += [".nf", esc(u), ".fi"]
page.append(".SH DESCRIPTION")
section_open = False
for line in body:
    if not line.strip():
        page.append(".PP")
        continue
    m = re.match(r"^  +(-\S.*?)(\s{2,}|$)(.*)$", line)
    if m:  # an option and its text
        page += [".TP", ".B %s" % esc(m.group(1).strip()), esc(m.group(3).strip())]
    elif line.endswith(":") and not line.startswith(" "):
        page += [".SS %s" % esc(line[:-1])]
    else:
        page.append(esc(line.strip()))
page += [".SH SEE ALSO", "weft(1), weft\\-serve(1), weft\\-submit(1); the README and "
         "docs/openapi.json of the weft sources."]
with open(out, "w") as f:
    f.write("\n".join(page) + "\n")
