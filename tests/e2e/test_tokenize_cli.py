"""weft tokenize as a user runs it: the JSON shape of the issue ({"tokenizers": [{"folder", "ids",
"pieces", "truncated", ...}]}) with the ids transformers' tokenizers give (tests/data/text's
corpus expectations) for the tiny text pipeline, the text form, and the refusals (no tokenizers,
invalid UTF-8, a bad length, a missing --prompt) as one-line errors with exit status 1 or 2."""
import json
import os
import subprocess
import sys

weft = sys.argv[1]
root = os.environ["WEFT_SOURCE_ROOT"]
pipe = os.path.join(root, "tests", "data", "text", "pipeline")
corpus = json.load(open(os.path.join(root, "tests", "data", "text", "corpus.json"), encoding="utf-8"))["valid"]
expected = json.load(open(os.path.join(root, "tests", "data", "text", "expected_tokens.json"), encoding="utf-8"))


def run(*args, ok=True):
    p = subprocess.run([weft, "tokenize", *args], capture_output=True, timeout=60)
    if ok and p.returncode != 0:
        sys.exit(f"weft tokenize {args!r} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p


checked = 0
for i in range(0, len(corpus), 13):  # a spread of the corpus, the empty string first
    s = corpus[i]
    if s.startswith("-"):
        continue  # an option's look-alike; the unit test covers it
    out = json.loads(run("--model", pipe, "--prompt", s, "--json").stdout)
    toks = out["tokenizers"]
    assert [t["folder"] for t in toks] == ["tokenizer", "tokenizer_2"], toks
    for t, key, pad in ((toks[0], "clip", 49407), (toks[1], "t5", 0)):
        want = expected[i][key]
        ids = want["ids"] + [pad] * (len(t["ids"]) - len(want["ids"]))
        assert t["ids"] == ids, (i, key, s[:40], t["ids"][:12], ids[:12])
        assert t["pieces"][: len(want["pieces"])] == want["pieces"], (i, key)
        assert t["truncated"] == (want["untruncated"] > len(t["ids"])), (i, key)
        assert t["untruncated"] == want["untruncated"], (i, key)
        assert t["dropped"] == want["dropped"], (i, key, t["dropped"], want["dropped"])
    assert len(toks[0]["ids"]) == 77 and len(toks[1]["ids"]) == 512
    checked += 1
assert checked >= 25, checked

# --max-sequence-length and the text form
t = json.loads(run("--model", pipe, "--prompt", corpus[expected.index(next(e for e in expected if e["t5_16"]["dropped"]))],
                   "--max-sequence-length", "16", "--json").stdout)["tokenizers"][1]
assert len(t["ids"]) == 16 and t["truncated"] and t["dropped"], t
text = run("--model", pipe, "--prompt", "a photo of a cat").stdout.decode()
assert "tokenizer (CLIPTokenizer): 77 ids, 7 before the padding" in text, text
assert "pieces: <|startoftext|> a</w> photo</w> of</w> a</w> cat</w> <|endoftext|>" in text, text

# refusals: one line, the reason
p = run("--prompt", "a cat", ok=False)  # the embedded model has no tokenizers
assert p.returncode == 1 and b"flux-tiny cannot encode text" in p.stderr and b"tokenizer_2" in p.stderr, p.stderr
p = run("--model", pipe, "--prompt", b"caf\xe9", ok=False)
assert p.returncode == 1 and b"--prompt: not valid UTF-8 (byte 3)" in p.stderr, p.stderr
p = run("--model", pipe, "--prompt", "x", "--max-sequence-length", "513", ok=False)
assert p.returncode == 2 and b"--max-sequence-length '513'" in p.stderr, p.stderr
p = run("--model", pipe, ok=False)
assert p.returncode == 2 and b"--prompt TEXT is required" in p.stderr, p.stderr
for p in (run("--model", pipe, "--prompt", "x", "--bogus", ok=False),):
    assert p.returncode == 2 and b"unexpected argument '--bogus'" in p.stderr, p.stderr
# an option at the end without its value is named as such (it read as an unexpected argument)
p = run("--model", pipe, "--prompt", ok=False)
assert p.returncode == 2 and b"--prompt needs a value" in p.stderr, p.stderr
print(f"tokenize cli: {checked} corpus strings equal transformers' ids; refusals ok")
