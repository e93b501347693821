"""Tiny FLUX.2 and Qwen-Image transformer checkpoints, for tensor-parallel plan resolution only.

Run from the repository root (CPU only, a few seconds):

    /opt/goldenv/bin/python tests/golden/make_other.py

Run order: independent of the other generators (reads nothing they write); see tests/golden/README.md.

Environment: torch 2.15 (CPU), diffusers 0.42.1. Not run in CI; outputs are committed. Re-running
regenerates every file bit-identically. No golden outputs are written (a smoke forward pass is run and
its std printed, to show the checkpoints are usable).

What it writes (deletes and rebuilds tests/data/flux2/tiny/ and tests/data/qwenimage/tiny/):

  tests/data/flux2/tiny/       Flux2Transformer2DModel.save_pretrained (config.json +
                               diffusion_pytorch_model.safetensors), BFLOAT16 weights, plus
                               PARAMS.txt (one line per parameter: "name dtype shape") and README.md
                               (the class's _tp_plan and the _tp_packed_*_blocks attributes, read from
                               the installed diffusers).
  tests/data/qwenimage/tiny/   QwenImageTransformer2DModel, same set of files, BFLOAT16 weights.

The checkpoints exist only so that a tensor-parallel plan can be resolved against real parameter
names / shapes, so they are as small as the classes allow while keeping 12 attention heads (every TP
degree dividing 12 stays testable, one head per rank at TP 12):
  FLUX.2:     patch_size 1, in_channels 4, 1 double + 1 single block, 12 heads x head_dim 4 (inner 48),
              joint_attention_dim 8, timestep_guidance_channels 16, mlp_ratio 0.25 (mlp_hidden 12, the
              smallest multiple of 12, so the packed blocks [48,48,48,12,12] / [48,12] have distinct
              sizes and every block divides by 12), axes_dims_rope (0, 2, 2, 0), guidance_embeds True;
              all Linears bias-free (class behaviour).
  Qwen-Image: patch_size 2, in_channels 4, out_channels 1 (in = out * patch^2, as in the real model),
              1 layer, 12 heads x head_dim 4 (inner 48), joint_attention_dim 8, axes_dims_rope (0, 2, 2).
  in_channels / joint_attention_dim / timestep_guidance_channels are small but distinct, so no two
  embedder weights have the same shape.
  NOTE axes_dims_rope: head_dim 4 cannot be split into 4 (FLUX.2) or 3 (Qwen-Image) RoPE axes that are
  all even and >= 2, so the frame / text axes get width 0 (no rotation on them). Diffusers accepts this
  (get_1d_rotary_pos_embed / rope_params of width 0 are empty and the smoke forward pass runs), but a
  config validator that demands every axis >= 2 (as model/flux.c does for FLUX.1) would reject these
  configs; they are not meant to be run, only to have their names/shapes read.
Weights: torch.manual_seed then golden_common.reinit_transformer (every parameter re-drawn, in float32),
then the model is cast to bfloat16 and saved. The smoke pass loads the bf16 checkpoint and runs it in
float32 (.to(torch.float32)).
"""

import sys

sys.dont_write_bytecode = True

import copy
import json
import os
import shutil

import torch

import golden_common as gc
from diffusers import Flux2Transformer2DModel, QwenImageTransformer2DModel


def fmt_style(v):
    if isinstance(v, str):
        return json.dumps(v)
    blocks = getattr(v, "blocks", None)
    return f"{type(v).__name__}({'' if blocks is None else blocks})"


def packed_attrs(model):
    out = []
    for name, mod in model.named_modules():
        for attr in ("_tp_packed_col_blocks", "_tp_packed_row_blocks"):
            if hasattr(mod, attr):
                out.append((name, attr, list(getattr(mod, attr))))
    return out


def write_params(model, path):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for name, p in model.state_dict().items():
            dt = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[p.dtype]
            f.write(f"{name} {dt} {list(p.shape)}\n")


def write_readme(cls, model, cfg, path, title, smoke):
    lines = [f"# {title}: tiny `{cls.__name__}` (random weights)", ""]
    lines += [
        "Written by `tests/golden/make_other.py` (diffusers 0.42.1). Only for tensor-parallel plan",
        "resolution / checkpoint-layout tests: there are no golden outputs. Weights are random",
        "(torch.manual_seed + re-initialisation of every parameter in float32), stored as bfloat16.",
        "Sized as small as the class allows with 12 attention heads (see the make_other.py docstring);",
        "`axes_dims_rope` contains 0-wide axes because head_dim 4 cannot be split into axes that are all",
        ">= 2 (Diffusers runs it; a strict validator would reject it; not meant to be run).",
        "",
        "Constructor arguments:",
        "",
        "```json",
        json.dumps(cfg, indent=2, sort_keys=True),
        "```",
        "",
        f"Parameters: {sum(p.numel() for p in model.parameters())} in {len(model.state_dict())} tensors;",
        "`PARAMS.txt` lists each as `name dtype shape` (state_dict order).",
        f"Smoke forward pass (not stored): {smoke}.",
        "",
        f"## `{cls.__name__}._tp_plan` (verbatim from the installed diffusers 0.42.1)",
        "",
    ]
    plan = getattr(cls, "_tp_plan", None)
    if plan is None:
        lines.append("`_tp_plan` does not exist on this class in diffusers 0.42.1.")
    else:
        lines.append("```")
        for k, v in plan.items():
            lines.append(f'"{k}": {fmt_style(v)},')
        lines.append("```")
        lines.append("")
        lines.append("String styles map to torch's ColwiseParallel / RowwiseParallel. A `Packed*Parallel()` with")
        lines.append("no argument takes its block structure from the `_tp_packed_col_blocks` /")
        lines.append("`_tp_packed_row_blocks` attribute set on the Linear at construction.")
    lines += ["", "## `_tp_packed_*_blocks` attributes on submodules (values in this tiny model)", ""]
    pa = packed_attrs(model)
    if not pa:
        lines.append("None: no submodule carries `_tp_packed_col_blocks` or `_tp_packed_row_blocks`.")
    else:
        lines.append("| module | attribute | value |")
        lines.append("|---|---|---|")
        for name, attr, val in pa:
            lines.append(f"| `{name}` | `{attr}` | {val} |")
    lines.append("")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines))


def make(cls, cfg, out, seed, title, smoke_fn):
    if os.path.isdir(out):
        shutil.rmtree(out)
    torch.manual_seed(seed)
    m = cls(**cfg)
    gc.reinit_transformer(m, seed, mod_gain=1.5)
    m = m.to(torch.bfloat16)
    m.eval()
    m.save_pretrained(out, safe_serialization=True)
    m = cls.from_pretrained(out, torch_dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in m.state_dict().values())
    m.eval()
    with torch.no_grad():
        o = smoke_fn(copy.deepcopy(m).to(torch.float32))
    assert torch.isfinite(o).all()
    smoke = f"output shape {list(o.shape)}, std {o.std().item():.4f}"
    gc.log(f"{title}: {sum(p.numel() for p in m.parameters())} params; {smoke}")
    write_params(m, os.path.join(out, "PARAMS.txt"))
    write_readme(cls, m, cfg, os.path.join(out, "README.md"), title, smoke)
    gc.log(f"  _tp_plan: {getattr(cls, '_tp_plan', None) is not None}; packed attrs: {packed_attrs(m)}")
    gc.list_written(out)


def flux2_smoke(m):
    S, T = 16, 5
    c = m.config
    # FLUX.2 ids are [B, S, 4] (t, h, w, l) for the image and text tokens.
    img_ids = torch.zeros(1, S, 4)
    img_ids[0, :, 1] = torch.arange(S) // 4
    img_ids[0, :, 2] = torch.arange(S) % 4
    txt_ids = torch.zeros(1, T, 4)
    txt_ids[0, :, 3] = torch.arange(T)
    return m(
        hidden_states=gc.randn((1, S, c.in_channels), 1),
        encoder_hidden_states=gc.randn((1, T, c.joint_attention_dim), 2),
        timestep=torch.tensor([0.5]),
        img_ids=img_ids,
        txt_ids=txt_ids,
        guidance=torch.tensor([4.0]),
    ).sample


def qwen_smoke(m):
    T = 5
    c = m.config
    return m(
        hidden_states=gc.randn((1, 16, c.in_channels), 1),
        encoder_hidden_states=gc.randn((1, T, c.joint_attention_dim), 2),
        encoder_hidden_states_mask=torch.ones(1, T),
        timestep=torch.tensor([0.5]),
        img_shapes=[(1, 4, 4)],
    ).sample


def main():
    gc.setup()
    make(
        Flux2Transformer2DModel,
        dict(
            patch_size=1,
            in_channels=4,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=4,
            num_attention_heads=12,
            joint_attention_dim=8,
            timestep_guidance_channels=16,
            mlp_ratio=0.25,
            axes_dims_rope=(0, 2, 2, 0),
            guidance_embeds=True,
        ),
        gc.repo_path("tests", "data", "flux2", "tiny"),
        301,
        "FLUX.2",
        flux2_smoke,
    )
    make(
        QwenImageTransformer2DModel,
        dict(
            patch_size=2,
            in_channels=4,
            out_channels=1,
            num_layers=1,
            attention_head_dim=4,
            num_attention_heads=12,
            joint_attention_dim=8,
            axes_dims_rope=(0, 2, 2),
        ),
        gc.repo_path("tests", "data", "qwenimage", "tiny"),
        302,
        "Qwen-Image",
        qwen_smoke,
    )


if __name__ == "__main__":
    main()
