#!/usr/bin/env python3
"""Time Diffusers' FluxTransformer2DModel (--class flux2: Flux2Transformer2DModel) forward with
torch, for `weft bench flux`.

Loads the same synthetic checkpoint weft loads onto --device (cpu, or cuda:N: the GPU weft runs
on), computes in --dtype (f32 or bf16: the model and its inputs in that dtype, guidance f32, as
FluxPipeline passes them) and builds inputs like FluxPipeline does, then prints one JSON line
{"ready": true, ...} and serves the benchmark's rounds: for each line "run" on stdin, one timed
forward pass and one line {"ms": milliseconds} (the benchmark interleaves it with weft's passes).
On a GPU the device is synchronised before and after each pass, so its time is the GPU's work,
not the launches'. Ends at EOF or any other line.
Needs torch and diffusers (PyPI); used only by the benchmark, never by weft itself.
"""
import argparse
import json
import math
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--text", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--class", dest="cls", choices=("flux", "flux2", "qwenimage"), default="flux")
    a = ap.parse_args()

    import torch
    import diffusers
    from diffusers import Flux2Transformer2DModel, FluxTransformer2DModel, QwenImageTransformer2DModel

    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    dev = torch.device(a.device)
    klass = {"flux": FluxTransformer2DModel, "flux2": Flux2Transformer2DModel,
             "qwenimage": QwenImageTransformer2DModel}[a.cls]
    model = klass.from_pretrained(a.model, torch_dtype=dt).to(dev).eval()
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    sync()
    load_s = time.perf_counter() - t0
    cfg = model.config
    g = torch.Generator().manual_seed(0)
    w = int(math.isqrt(a.tokens))
    rows = torch.arange(a.tokens) // w
    cols = torch.arange(a.tokens) % w
    img_ids = torch.stack([torch.zeros(a.tokens), rows.float(), cols.float()], dim=1)

    def on(t):  # drawn on the CPU (the same numbers on any device), then moved
        return t.to(dev, dt)

    inputs = dict(
        hidden_states=on(torch.randn(1, a.tokens, cfg.in_channels, generator=g)),
        encoder_hidden_states=on(torch.randn(1, a.text, cfg.joint_attention_dim, generator=g)),
        timestep=on(torch.tensor([0.5])),
        img_ids=on(img_ids),
        txt_ids=on(torch.zeros(a.text, 3)),
        guidance=torch.tensor([3.5]).to(dev) if cfg.guidance_embeds else None,
        return_dict=False,
    )
    if a.cls == "flux2":  # Flux2Pipeline's ids: [0, row, col, 0] and [0, 0, 0, l]; no pooled
        zi = torch.zeros(a.tokens)
        inputs["img_ids"] = on(torch.stack([zi, rows.float(), cols.float(), zi], dim=1))
        inputs["txt_ids"] = on(torch.stack([torch.zeros(a.text)] * 3 + [torch.arange(a.text).float()],
                                           dim=1))
    elif a.cls == "qwenimage":  # positions from img_shapes (the grid), no ids, no guidance
        for k in ("img_ids", "txt_ids", "guidance"):
            del inputs[k]
        inputs["img_shapes"] = [(1, (a.tokens + w - 1) // w, w)]
    else:
        inputs["pooled_projections"] = on(torch.randn(1, cfg.pooled_projection_dim, generator=g))
    if dev.type == "cuda":
        backend = torch.cuda.get_device_name(dev)
    else:
        backend = f"oneDNN bf16: {torch.backends.mkldnn.is_available()}"
    print(json.dumps({
        "ready": True,
        "load_s": load_s,
        "threads": torch.get_num_threads(),
        "about": f"torch {torch.__version__}, diffusers {diffusers.__version__}, {a.dtype}, "
                 f"{a.device}, {backend}",
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
    }), flush=True)
    with torch.inference_mode():
        while sys.stdin.readline().strip() == "run":
            sync()
            t0 = time.perf_counter()
            model(**inputs)
            sync()
            print(json.dumps({"ms": (time.perf_counter() - t0) * 1e3}), flush=True)


if __name__ == "__main__":
    main()
