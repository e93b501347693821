#!/usr/bin/env python3
"""One FluxPipeline image on the CPU with torch, for `weft bench generate`.

Loads the pipeline folder the benchmark wrote (transformer, VAE, scheduler; no text encoders:
the prompt embeddings come from prompts/bench.safetensors, as weft's do) in --dtype, makes one
image of --height x --width in --steps steps with seed 0, writes it to --out and prints one JSON
line {"load_s", "run_s"}. The benchmark times the whole process and reads its peak RSS.
Needs torch, diffusers and safetensors (PyPI); used only by the benchmark, never by weft.
"""
import argparse
import json
import time


def main():
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import torch
    from diffusers import FluxPipeline
    from safetensors.torch import load_file

    torch.set_num_threads(a.threads)
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    none = {k: None for k in ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2",
                              "feature_extractor", "image_encoder")}
    pipe = FluxPipeline.from_pretrained(a.model, torch_dtype=dt, **none)
    pipe.set_progress_bar_config(disable=True)
    emb = load_file(f"{a.model}/prompts/bench.safetensors")
    load_s = time.perf_counter() - t_start
    t0 = time.perf_counter()
    with torch.inference_mode():
        image = pipe(prompt_embeds=emb["prompt_embeds"].to(dt),
                     pooled_prompt_embeds=emb["pooled_prompt_embeds"].to(dt),
                     height=a.height, width=a.width, num_inference_steps=a.steps,
                     guidance_scale=3.5, generator=torch.Generator().manual_seed(0)).images[0]
    image.save(a.out)
    print(json.dumps({"load_s": load_s, "run_s": time.perf_counter() - t0,
                      "about": f"torch {torch.__version__}, {a.dtype}"}), flush=True)


if __name__ == "__main__":
    main()
