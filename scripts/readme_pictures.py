"""The README's pictures, made by this build's weft on the embedded default model.

    python3 scripts/readme_pictures.py            # needs Pillow (PyPI or Debian's python3-pil)

Writes, from the repository root:
  docs/first-run.png      what the README's first command writes (its `build/weft ...` part, read
                          from README.md and run as is: a local cluster, tensor parallelism 2)
  docs/contact-sheet.png  a dozen prompts from `weft generate` (seed i for prompt i), each with
                          its prompt under it

Run by hand after the model or the pipeline changes; not run in CI. The environment is the
user's: WEFT_MODEL_PATH is removed, so the embedded model is what runs.
"""

import os
import shlex
import subprocess
import sys
import tempfile

from PIL import Image, ImageDraw

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
WEFT = os.path.join(ROOT, "build", "weft")
SHEET = [
    "a red circle on a blue background",
    "a small yellow star in the top left corner, black background",
    "a large orange triangle in the center on a green background",
    "a white cross at the bottom on a red background",
    "a purple ring in the bottom right corner on a yellow background",
    "black background with a large blue square in the middle",
    "a small green circle at the top, orange background",
    "a yellow triangle on the right on a purple background",
    "a large white star on a blue background",
    "a black cross on the left on a white background",
    "two shapes: a green square on the left and a white ring on the right, purple background",
    "a red square in the top right corner and a yellow circle in the bottom left corner on a black background",
]


def first_command():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        for line in f:
            at = line.find("build/weft ")
            if at >= 0:
                words = shlex.split(line[at:], comments=True)
                for stop in ("&&", ";"):
                    if stop in words:
                        words = words[: words.index(stop)]
                return words[1:]
    sys.exit("README.md has no build/weft command")


def env():
    e = dict(os.environ)
    e.pop("WEFT_MODEL_PATH", None)
    return e


def main():
    docs = os.path.join(ROOT, "docs")
    args = first_command()
    out = args[args.index("--out") + 1]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([WEFT] + args, cwd=tmp, env=env(), check=True)
        Image.open(os.path.join(tmp, out)).save(os.path.join(docs, "first-run.png"))
        tiles = []
        for i, p in enumerate(SHEET):
            path = os.path.join(tmp, f"{i}.png")
            subprocess.run([WEFT, "generate", "--prompt", p, "--seed", str(i), "--out", path],
                           env=env(), check=True, stderr=subprocess.DEVNULL)
            tiles.append(Image.open(path).convert("RGB"))
    side, cols, label = tiles[0].width * 2, 4, 44
    rows = (len(tiles) + cols - 1) // cols
    sheet = Image.new("RGB", (cols * side, rows * (side + label)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for i, (t, p) in enumerate(zip(tiles, SHEET)):
        x, y = (i % cols) * side, (i // cols) * (side + label)
        sheet.paste(t.resize((side, side), Image.NEAREST), (x, y))
        words, lines = p.split(), [""]
        for w in words:
            if draw.textlength(lines[-1] + " " + w) > side - 8 and lines[-1]:
                lines.append(w)
            else:
                lines[-1] = (lines[-1] + " " + w).strip()
        for k, text in enumerate(lines[:4]):
            draw.text((x + 4, y + side + 2 + 10 * k), text, fill=(0, 0, 0))
    sheet.save(os.path.join(docs, "contact-sheet.png"), optimize=True)
    print("wrote docs/first-run.png and docs/contact-sheet.png")


if __name__ == "__main__":
    main()
