"""Tokenizer files for weft's native tokenizers and their parity corpus (real transformers).

Run from the repository root (CPU only, ~20 s):

    /opt/goldenv/bin/pip install --no-deps open_clip_torch==3.3.0   # only for its BPE vocabulary file
    /opt/goldenv/bin/python tests/golden/make_tokenizers.py

Environment: transformers 5.24 (tokenizers 0.23), sentencepiece 0.2.3 (PyPI), open_clip_torch 3.3.0
(its bpe_simple_vocab_16e6.txt.gz, read as a file: open_clip is not imported). Not run in CI; the
outputs are committed. Re-running regenerates every file bit-identically.

What it writes (deletes and rebuilds tests/data/text/tokenizer*, corpus.json, expected_tokens.json):

  tests/data/text/tokenizer/          CLIP-L's real BPE vocabulary as FLUX.1's tokenizer/ folder holds it:
    vocab.json, merges.txt            built from open_clip's bpe_simple_vocab_16e6.txt.gz exactly as
                                      OpenAI's SimpleTokenizer builds its vocabulary (256 byte symbols,
                                      the same with </w>, 48894 merges, <|startoftext|>, <|endoftext|>:
                                      49408 tokens), in Hugging Face's file format
    tokenizer_config.json,            CLIPTokenizer, model_max_length 77, special tokens as
    special_tokens_map.json           openai/clip-vit-large-patch14 declares them
  tests/data/text/tokenizer_2/        a small SentencePiece unigram model standing in for T5's:
    spiece.model                      trained here (vocab 500, nmt_nfkc, pad 0, eos 1, unk 2, no bos,
                                      character_coverage 0.9995) on sentences this script makes
    tokenizer.json                    the same converted by transformers (T5TokenizerFast.save_pretrained)
    tokenizer_config.json,            T5Tokenizer, extra_ids 100, model_max_length 512
    special_tokens_map.json
  tests/data/text/corpus.json         {"valid": [str, ...], "invalid_hex": [hex, ...]}: the parity corpus
  tests/data/text/expected_tokens.json
                                      for every valid string, what FluxPipeline's two tokenizer calls give
                                      (CLIPTokenizer at 77, T5TokenizerFast at max_sequence_length 512 and 16),
                                      loaded by from_pretrained from the folders above: the input ids with
                                      the trailing padding cut off, the pieces (convert_ids_to_tokens), the
                                      untruncated length and the text Diffusers names as dropped
                                      (batch_decode of untruncated_ids[max_length - 1 : -1])

Checks made here (the script fails otherwise): CLIPTokenizer.from_pretrained and
T5TokenizerFast.from_pretrained load the folders; CLIP's ids for a known sentence are OpenAI's; the
T5 tokenizer loaded with and without tokenizer.json agree on the whole corpus.
"""

import sys

sys.dont_write_bytecode = True

import gzip
import importlib.util
import json
import os
import random
import shutil

import golden_common as gc

OUT = gc.repo_path("tests", "data", "text")
CLIP_DIR = os.path.join(OUT, "tokenizer")
T5_DIR = os.path.join(OUT, "tokenizer_2")


def bytes_to_unicode():
    """OpenAI CLIP / GPT-2's byte -> printable character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def write_json(path, obj, indent=2):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent)
        f.write("\n")


def make_clip():
    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        sys.exit("open_clip_torch is not installed: /opt/goldenv/bin/pip install --no-deps open_clip_torch==3.3.0")
    path = os.path.join(os.path.dirname(spec.origin), "bpe_simple_vocab_16e6.txt.gz")
    lines = gzip.open(path).read().decode("utf-8").split("\n")
    merges = [tuple(m.split()) for m in lines[1 : 49152 - 256 - 2 + 1]]  # as open_clip's SimpleTokenizer
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab]
    vocab += ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == 49408 and len(merges) == 48894
    os.makedirs(CLIP_DIR)
    write_json(os.path.join(CLIP_DIR, "vocab.json"), {t: i for i, t in enumerate(vocab)}, indent=None)
    with open(os.path.join(CLIP_DIR, "merges.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    special = {"content": None, "lstrip": False, "normalized": True, "rstrip": False, "single_word": False}
    sot = dict(special, content="<|startoftext|>")
    eot = dict(special, content="<|endoftext|>")
    write_json(os.path.join(CLIP_DIR, "special_tokens_map.json"),
               {"bos_token": sot, "eos_token": eot, "pad_token": "<|endoftext|>", "unk_token": eot})
    write_json(os.path.join(CLIP_DIR, "tokenizer_config.json"), {
        "add_prefix_space": False,
        "added_tokens_decoder": {"49406": dict(sot, special=True), "49407": dict(eot, special=True)},
        "bos_token": "<|startoftext|>",
        "clean_up_tokenization_spaces": True,
        "do_lower_case": True,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 77,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "CLIPTokenizer",
        "unk_token": "<|endoftext|>",
    })


WORDS = """a an the of in on at with under over by from into near beside behind above below and or
photo painting drawing sketch render portrait landscape closeup view scene picture illustration
cat dog fox wolf bear horse bird owl eagle fish whale dragon robot astronaut knight wizard girl boy
woman man child king queen castle tower lighthouse bridge city village forest mountain river lake
ocean sea beach desert island valley field garden street road house room window door table chair
red green blue yellow orange purple black white golden silver dark bright pale misty foggy snowy
sunny rainy stormy quiet ancient modern futuristic tiny huge beautiful detailed realistic soft sharp
night day morning evening sunset sunrise dusk dawn winter summer autumn spring light shadow fire
water ice stone wood glass metal gold sky cloud star moon sun rain snow wind smoke flower tree leaf
running sitting standing flying swimming sleeping walking looking holding wearing riding reading
cinematic lighting volumetric octane unreal engine artstation trending highly intricate masterpiece
style oil watercolor pencil digital art concept matte anime studio film grain bokeh depth focus""".split()
FOREIGN = ["Ein Fuchs läuft über die Straße im Schnee.", "Le café est très chaud à Paris ce matin.",
           "El niño come una manzana en el jardín.", "Une œuvre d'art: la forêt enchantée.",
           "Привет, мир! Москва ночью.", "Γειά σου κόσμε, καλημέρα.", "東京の夜景はとてもきれいです。",
           "一只猫坐在窗台上。", "Zürich, Genève, São Paulo, Kraków.", "It's a dog's life, isn't it?",
           "Numbers: 1, 2, 3, 10, 100, 2024, 3.14 and 42%.", "(brackets) [square] {curly} <angle> \"quotes\""]


def training_text():
    rng = random.Random(7)
    lines = []
    for _ in range(20000):
        n = rng.randint(3, 14)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        s = " ".join(words)
        if rng.random() < 0.4:
            s += rng.choice([",", ".", "!", "?", ";", " 4k", " 8K", " 1080p", " (HDR)"])
        lines.append(s)
    return lines + FOREIGN * 50


def make_t5(tmp):
    import sentencepiece as spm

    import io

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text()), model_writer=model, vocab_size=500,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=0.9995,
        num_threads=1, minloglevel=2)
    os.makedirs(T5_DIR)
    with open(os.path.join(T5_DIR, "spiece.model"), "wb") as f:
        f.write(model.getvalue())
    extra = [f"<extra_id_{i}>" for i in range(100)]
    write_json(os.path.join(T5_DIR, "tokenizer_config.json"), {
        "additional_special_tokens": extra,
        "clean_up_tokenization_spaces": True,
        "eos_token": "</s>",
        "extra_ids": 100,
        "model_max_length": 512,
        "pad_token": "<pad>",
        "tokenizer_class": "T5Tokenizer",
        "unk_token": "<unk>",
    })
    write_json(os.path.join(T5_DIR, "special_tokens_map.json"), {
        "additional_special_tokens": extra, "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"})
    # tokenizer.json as transformers converts spiece.model (from a folder without one)
    from transformers import T5TokenizerFast

    conv = os.path.join(tmp, "t5conv")
    os.makedirs(conv)
    for f in ("spiece.model", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(os.path.join(T5_DIR, f), os.path.join(conv, f))
    tok = T5TokenizerFast.from_pretrained(conv)
    saved = os.path.join(tmp, "t5saved")
    tok.save_pretrained(saved)
    with open(os.path.join(saved, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    write_json(os.path.join(T5_DIR, "tokenizer.json"), tj, indent=2)
    return conv


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from text_corpus import INVALID, corpus  # noqa: E402


def expected(clip, t5, t5_conv, strings):
    out = []
    for s in strings:
        e = {}
        for key, tok, max_len in (("clip", clip, 77), ("t5", t5, 512), ("t5_16", t5, 16)):
            ids = tok(s, padding="max_length", max_length=max_len, truncation=True).input_ids
            full = tok(s).input_ids
            assert len(ids) == max_len
            pad = tok.pad_token_id
            n = len(ids)
            while n > 0 and ids[n - 1] == pad:
                n -= 1
            e[key] = {
                "ids": ids[:n],
                "pieces": tok.convert_ids_to_tokens(ids[:n]),
                "untruncated": len(full),
                "dropped": tok.batch_decode([full[max_len - 1 : -1]])[0] if len(full) > max_len else None,
            }
        conv_ids = t5_conv(s, padding="max_length", max_length=512, truncation=True).input_ids
        assert conv_ids == t5(s, padding="max_length", max_length=512, truncation=True).input_ids, s
        out.append(e)
    return out


def main():
    gc.setup()
    for p in (CLIP_DIR, T5_DIR):
        if os.path.isdir(p):
            shutil.rmtree(p)
    import tempfile

    from transformers import CLIPTokenizer, T5TokenizerFast

    make_clip()
    with tempfile.TemporaryDirectory() as tmp:
        conv_dir = make_t5(tmp)
        clip = CLIPTokenizer.from_pretrained(CLIP_DIR)
        t5 = T5TokenizerFast.from_pretrained(T5_DIR)
        t5_conv = T5TokenizerFast.from_pretrained(conv_dir)
        assert clip.model_max_length == 77 and t5.model_max_length == 512
        # OpenAI's ids for this sentence (CLIP's own tokenizer, any CLIP-L checkpoint)
        assert clip("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407], clip("a photo of a cat")
        strings = corpus()
        assert len(strings) >= 300 and len(set(strings)) == len(strings)
        write_json(os.path.join(OUT, "corpus.json"),
                   {"valid": strings, "invalid_hex": [b.hex() for b in INVALID]}, indent=1)
        write_json(os.path.join(OUT, "expected_tokens.json"), expected(clip, t5, t5_conv, strings), indent=None)
    gc.list_written(OUT)


if __name__ == "__main__":
    main()
