#!/usr/bin/env python3
"""Time Diffusers' FluxTransformer2DModel forward with torch, for `weft bench flux`.

Loads the same synthetic checkpoint weft loads (bf16 on disk; float32 or bfloat16 compute, on
the CPU or a CUDA device), builds inputs like FluxPipeline does, and prints one JSON line:
{"ms": [per-run milliseconds], ...}. On a GPU each run is synchronised before it is timed.
Needs torch and diffusers (PyPI); used only by the benchmark, never by weft itself.
"""
import argparse
import json
import math
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--text", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    a = ap.parse_args()

    import torch
    import diffusers
    from diffusers import FluxTransformer2DModel

    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    dev = torch.device(a.device)
    model = FluxTransformer2DModel.from_pretrained(a.model, torch_dtype=dtype).to(dev).eval()
    load_s = time.perf_counter() - t0
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    w = int(math.isqrt(a.tokens))
    rows = torch.arange(a.tokens) // w
    cols = torch.arange(a.tokens) % w
    img_ids = torch.stack([torch.zeros(a.tokens), rows.float(), cols.float()], dim=1)
    def on(t):
        return t.to(dev, dtype)

    inputs = dict(
        hidden_states=on(torch.randn(1, a.tokens, cfg.in_channels, generator=g)),
        encoder_hidden_states=on(torch.randn(1, a.text, cfg.joint_attention_dim, generator=g)),
        pooled_projections=on(torch.randn(1, cfg.pooled_projection_dim, generator=g)),
        timestep=on(torch.tensor([0.5])),
        img_ids=img_ids.to(dev),
        txt_ids=torch.zeros(a.text, 3).to(dev),
        guidance=on(torch.tensor([3.5])) if cfg.guidance_embeds else None,
        return_dict=False,
    )
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    with torch.inference_mode():
        for i in range(a.warmup + a.repeats):
            sync()
            t0 = time.perf_counter()
            model(**inputs)
            sync()
            if i >= a.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({
        "ms": times,
        "load_s": load_s,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
    }))


if __name__ == "__main__":
    main()
