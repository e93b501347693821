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
usage = []
i = 0
while i < len(lines) and (lines[i].startswith("usage:") or (usage and lines[i].startswith(" "))):
    usage.append(lines[i].replace("usage: ", "", 1).strip())
    i += 1
body = lines[i:]
# NAME: the command's line of `weft --help` ("  serve      serve the job API ...")
summary = "distributed inference for diffusion transformers"
if cmd != "-":
    top = subprocess.run([weft, "--help"], check=True, capture_output=True, text=True).stdout
    for line in top.split("\n"):
        m = re.match(r"^  (\S+)\s+(.*)$", line)
        if m and m.group(1) == cmd:
            summary = m.group(2).strip()
page = [".TH %s 1 \"\" \"weft %s\" \"weft manual\"" % (name.upper(), version),
        ".SH NAME", "%s \\- %s" % (esc(name), esc(summary)), ".SH SYNOPSIS"]
for u in usage:
    page += [".nf", esc(u), ".fi"]
page.append(".SH DESCRIPTION")
prev_blank, in_option = True, False
for line in body:
    if not line.strip():
        page.append(".PP")
        prev_blank, in_option = True, False
        continue
    m = re.match(r"^ {1,4}(-\S.*?)(\s{2,})(\S.*)$", line) or re.match(r"^ {1,4}(-\S.*)$", line)
    if m:  # an option, and its text when it is on the same line
        page += [".TP", ".B %s" % esc(m.group(1).strip())]
        if m.lastindex and m.lastindex >= 3:
            page.append(esc(m.group(3).strip()))
        in_option = True
    elif in_option and line.startswith("   "):  # the option's text goes on
        page.append(esc(line.strip()))
    elif prev_blank and line.endswith(":") and len(line) < 48 and not line.startswith(" "):
        page.append(".SS %s" % esc(line[:-1]))
        in_option = False
    else:
        if in_option:
            page.append(".PP")
            in_option = False
        page.append(esc(line.strip()))
    prev_blank = False
page += [".SH SEE ALSO", "weft(1), weft\\-serve(1), weft\\-submit(1); the README and "
         "docs/openapi.json of the weft sources."]
with open(out, "w") as f:
    f.write("\n".join(page) + "\n")
