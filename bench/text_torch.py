#!/usr/bin/env python3
"""The transformers side of `weft bench text`: one encoder or one tokenizer, kept loaded.

--what clip|t5: loads the synthetic checkpoint weft wrote (CLIPTextModel / T5EncoderModel, bf16
on disk) in --dtype (f32 or bf16), on --threads threads, builds the same ids weft uses (the
formula of cli/bench_text.c's bench_ids), prints {"ready": true, ...}, then for each line "run"
on stdin one timed forward pass and {"ms": ..., "abs_sum": ...}.
--what tok-clip|tok-t5: CLIPTokenizerFast / T5TokenizerFast from the committed tokenizer files
(tests/data/text/tokenizer, tokenizer_2), the corpus's valid prompts (the first --limit; 0: all);
each "run" encodes every prompt once, one call each, padded and truncated to 77 / 512 tokens as
FluxPipeline asks, and answers {"ms": ..., "ids": ...}.
Ends at EOF or any other line. Needs torch and transformers (PyPI); used only by the benchmark.
"""
import argparse
import json
import sys
import time


def bench_ids(clip, vocab, n):
    ids = [(i * 7919 + 13) % (vocab - 2 if clip else vocab) for i in range(n)]
    if clip:
        ids[0], ids[-1] = vocab - 2, vocab - 1
    else:
        ids[-1] = 1
    return ids


def serve(step):
    while sys.stdin.readline().strip() == "run":
        t0 = time.perf_counter()
        extra = step()
        print(json.dumps(dict(ms=(time.perf_counter() - t0) * 1e3, **extra)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", required=True, choices=("clip", "t5", "tok-clip", "tok-t5"))
    ap.add_argument("--model", default="-")
    ap.add_argument("--tokens", type=int, default=77)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--root", default=".")
    a = ap.parse_args()

    import torch
    import transformers

    torch.set_num_threads(a.threads)
    about = f"torch {torch.__version__}, transformers {transformers.__version__}"
    if a.what.startswith("tok-"):
        clip = a.what == "tok-clip"
        path = f"{a.root}/tests/data/text/" + ("tokenizer" if clip else "tokenizer_2")
        cls = transformers.CLIPTokenizerFast if clip else transformers.T5TokenizerFast
        tok = cls.from_pretrained(path)
        with open(f"{a.root}/tests/data/text/corpus.json", encoding="utf-8") as f:
            texts = json.load(f)["valid"]
        if a.limit > 0:
            texts = texts[: a.limit]
        max_len = 77 if clip else 512
        print(json.dumps({"ready": True, "prompts": len(texts), "threads": a.threads,
                          "about": f"{about}, {cls.__name__}"}), flush=True)

        def step():
            n = 0
            for t in texts:
                n += len(tok(t, padding="max_length", max_length=max_len, truncation=True)
                         ["input_ids"])
            return {"ids": n}

        serve(step)
        return

    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    t0 = time.perf_counter()
    if a.what == "clip":
        model = transformers.CLIPTextModel.from_pretrained(a.model, dtype=dt).eval()
        vocab = model.config.vocab_size
    else:
        model = transformers.T5EncoderModel.from_pretrained(a.model, dtype=dt).eval()
        vocab = model.config.vocab_size
    load_s = time.perf_counter() - t0
    ids = torch.tensor([bench_ids(a.what == "clip", vocab, a.tokens)])
    print(json.dumps({"ready": True, "load_s": load_s, "threads": torch.get_num_threads(),
                      "about": f"{about}, {a.dtype}"}), flush=True)

    def step():
        with torch.inference_mode():
            out = model(input_ids=ids)
        y = out.pooler_output if a.what == "clip" else out.last_hidden_state
        return {"abs_sum": float(y.float().abs().sum())}

    serve(step)


if __name__ == "__main__":
    main()
