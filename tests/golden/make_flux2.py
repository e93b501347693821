"""Golden data for the FLUX.2 transformer (real Diffusers: Flux2Transformer2DModel).

Run from the repository root (CPU only, well under a minute on 2 cores):

    /opt/goldenv/bin/python tests/golden/make_flux2.py

Run order: independent of the other generators (reads nothing they write); see tests/golden/README.md.

Environment used: torch (CPU), diffusers 0.42.1, safetensors, numpy 2.x. Not run in CI; the outputs are
committed. Re-running regenerates every file bit-identically (fixed seeds, 2 threads,
torch.use_deterministic_algorithms).

What it writes (it first deletes tests/data/flux2/{tiny-g,tiny-nog,tiny-bf16,golden}; tests/data/flux2/tiny/
belongs to make_other.py and is left alone):
  tests/data/flux2/tiny-g/      Flux2Transformer2DModel, 2 double + 2 single blocks, guidance_embeds=True, f32
  tests/data/flux2/tiny-nog/    1 double + 1 single block, guidance_embeds=False, f32
  tests/data/flux2/tiny-bf16/   1 double + 1 single block, guidance_embeds=True, bf16 weights
  tests/data/flux2/golden/fwd_<model>_<rows>x<cols>_t<T>.safetensors   single forward passes
  tests/data/flux2/golden/loop_<model>_<rows>x<cols>_t<T>.safetensors  Flux2Pipeline.__call__, 4 steps,
                                output_type="latent" (vae, text_encoder and tokenizer None: the pipeline
                                then takes vae_scale_factor 8, and encode_prompt only builds the text ids)
  tests/data/flux2/golden/README.md                                    every file / tensor described

Common config: patch_size 1, in_channels 16, 12 heads x head_dim 8 (inner 96: tensor and context
parallelism at 2, 3 and 4 divide the heads), joint_attention_dim 24, timestep_guidance_channels 32,
mlp_ratio 3.0 (mlp_hidden 288), axes_dims_rope (2, 2, 2, 2), rope_theta 2000, eps 1e-6. All Linears
bias-free (the class's behaviour).

Inputs as Flux2Pipeline builds them: img_ids from Flux2Pipeline._prepare_latent_ids (T=0, H, W, L=0 per
token, row-major), txt_ids from Flux2Pipeline._prepare_text_ids (0, 0, 0, token index); the model reads
ids[0] of the batched [1, S, 4] ids. Weights: torch.manual_seed(<seed>), then golden_common.
reinit_transformer (Linear weights N(0, 1/fan_in), the three shared modulation Linears and norm_out
N(0, 1.5^2/fan_in), RMSNorm weights N(1, 0.2^2)).
"""

import sys

sys.dont_write_bytecode = True

import os
import shutil

import torch

import golden_common as gc
from diffusers import FlowMatchEulerDiscreteScheduler, Flux2Pipeline, Flux2Transformer2DModel

OUT = gc.repo_path("tests", "data", "flux2")
GOLD = os.path.join(OUT, "golden")
IN_CH, JOINT = 16, 24
COMMON = dict(
    patch_size=1,
    in_channels=IN_CH,
    num_attention_heads=12,
    attention_head_dim=8,
    joint_attention_dim=JOINT,
    timestep_guidance_channels=32,
    mlp_ratio=3.0,
    axes_dims_rope=(2, 2, 2, 2),
    rope_theta=2000,
    eps=1e-6,
)
MODELS = {
    # name: (num_layers, num_single_layers, guidance_embeds, dtype, seed)
    "tiny-g": (2, 2, True, torch.float32, 201),
    "tiny-nog": (1, 1, False, torch.float32, 202),
    "tiny-bf16": (1, 1, True, torch.bfloat16, 203),
}
MOD_GAIN = 1.5
TIMESTEP = 0.73
GUIDANCE = 4.0  # Flux2Pipeline's default guidance_scale
README = []


def build_models():
    for name, (nl, ns, g, dtype, seed) in MODELS.items():
        torch.manual_seed(seed)
        m = Flux2Transformer2DModel(num_layers=nl, num_single_layers=ns, guidance_embeds=g, **COMMON)
        gc.reinit_transformer(m, seed, mod_gain=MOD_GAIN)
        m = m.to(dtype)
        m.save_pretrained(os.path.join(OUT, name), safe_serialization=True)
        n = sum(p.numel() for p in m.parameters())
        gc.log(f"saved {name}: {n} params, dtype {dtype}")


def load(name, dtype=None):
    path = os.path.join(OUT, name)
    m = Flux2Transformer2DModel.from_pretrained(path, torch_dtype=dtype) if dtype else \
        Flux2Transformer2DModel.from_pretrained(path)
    m.eval()
    return m


def fwd_case(model_name, rows, cols, T, seed):
    _, _, guided, wdtype, _ = MODELS[model_name]
    S = rows * cols
    hs = gc.randn((1, S, IN_CH), seed + 1)
    ehs = gc.randn((1, T, JOINT), seed + 2)
    ts = torch.tensor([TIMESTEP], dtype=torch.float32)
    gd = torch.tensor([GUIDANCE], dtype=torch.float32) if guided else None
    iids = Flux2Pipeline._prepare_latent_ids(torch.zeros(1, IN_CH, rows, cols))
    tids = Flux2Pipeline._prepare_text_ids(ehs)

    def run(model, dt):
        with torch.no_grad():
            return model(
                hidden_states=hs.to(dt),
                encoder_hidden_states=ehs.to(dt),
                timestep=ts.to(dt),
                img_ids=iids,
                txt_ids=tids,
                guidance=gd,  # the pipeline passes it as float32; the model casts it itself
                return_dict=True,
            ).sample

    if wdtype == torch.bfloat16:
        m32 = load(model_name, torch.bfloat16).to(torch.float32)
        out = run(m32, torch.float32)
        out_bf16 = run(load(model_name, torch.bfloat16), torch.bfloat16)
        assert out_bf16.dtype == torch.bfloat16
    else:
        out = run(load(model_name), torch.float32)
        out_bf16 = None
    t = {
        "hidden_states": hs,
        "encoder_hidden_states": ehs,
        "timestep": ts,
        "img_ids": iids[0].float(),
        "txt_ids": tids[0].float(),
        "output": out,
    }
    if guided:
        t["guidance"] = gd
    if out_bf16 is not None:
        t["output_bf16"] = out_bf16.float()
    fn = f"fwd_{model_name}_{rows}x{cols}_t{T}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), t)
    msg = f"{fn}: output std {out.std().item():.4f} absmax {out.abs().max().item():.3f}"
    if out_bf16 is not None:
        msg += f" | max|bf16-f32| {(out_bf16.float() - out).abs().max().item():.4f}"
    gc.log(msg)
    assert torch.isfinite(out).all()
    meanings = {
        "hidden_states": "packed image latents fed to the model (random normal)",
        "encoder_hidden_states": "text-token embeddings (random normal)",
        "timestep": f"timestep as the pipeline passes it (sigma = t/1000), {TIMESTEP}",
        "guidance": f"guidance scale {GUIDANCE} (model multiplies by 1000 itself)",
        "img_ids": "Flux2Pipeline._prepare_latent_ids[0]: [0, row, col, 0] per token, row-major",
        "txt_ids": "Flux2Pipeline._prepare_text_ids[0]: [0, 0, 0, token index]",
        "output": "model(...).sample, float32 compute"
        + (" (bf16 checkpoint upcast with .to(torch.float32))" if wdtype == torch.bfloat16 else ""),
        "output_bf16": "model loaded with torch_dtype=bfloat16, hidden_states / encoder_hidden_states / "
        "timestep cast to bfloat16, guidance float32 (as the pipeline), result cast to float32",
    }
    rows_desc = [(k, list(v.shape), "F32", meanings.get(k, "")) for k, v in sorted(t.items())]
    README.append((fn, f"Forward pass of {model_name}, grid {rows} rows x {cols} cols (S_img={S}), T={T}.",
                   rows_desc))


# The scheduler: FlowMatchEulerDiscreteScheduler with dynamic shifting as FLUX.1-dev's config sets it. Given
# mu (Flux2Pipeline's compute_empirical_mu), base/max shift and lengths play no part; the time shift is the
# class default, exponential.
SCHED_CFG = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5,
                 max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096)


def loop_case(model_name, rows, cols, T, seed, steps=4):
    transformer = load(model_name)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHED_CFG)
    pipe = Flux2Pipeline(scheduler=scheduler, vae=None, text_encoder=None, tokenizer=None,
                         transformer=transformer)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor == 8
    step_latents = []

    def on_step_end(p, i, t, kw):
        step_latents.append(kw["latents"].detach().clone())
        return {}

    latents_4d = gc.randn((1, IN_CH, rows, cols), seed + 1)  # [B, 4 C, H/2, W/2] as prepare_latents draws
    prompt_embeds = gc.randn((1, T, JOINT), seed + 2)
    with torch.no_grad():
        res = pipe(prompt_embeds=prompt_embeds.clone(), latents=latents_4d.clone(), height=16 * rows,
                   width=16 * cols, num_inference_steps=steps, guidance_scale=GUIDANCE,
                   output_type="latent", callback_on_step_end=on_step_end, return_dict=True)
    final = res.images
    assert len(step_latents) == steps and torch.equal(final, step_latents[-1])
    t = {
        "latents_init": Flux2Pipeline._pack_latents(latents_4d),
        "prompt_embeds": prompt_embeds,
        "guidance_scale": gc.scalar(GUIDANCE),
        "sigmas": scheduler.sigmas.clone(),
        "timesteps": scheduler.timesteps.clone(),
    }
    for i, l in enumerate(step_latents):
        t[f"latents_step_{i}"] = l
    fn = f"loop_{model_name}_{rows}x{cols}_t{T}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), t)
    gc.log(f"{fn}: sigmas {scheduler.sigmas.tolist()}; final latents std {final.std().item():.4f}")
    meanings = {
        "latents_init": "Flux2Pipeline._pack_latents of the [1, 16, rows, cols] latents passed as latents= "
        "(random normal): [1, rows*cols, 16]",
        "prompt_embeds": "passed as prompt_embeds=",
        "guidance_scale": "guidance_scale",
        "sigmas": "scheduler.sigmas after set_timesteps (linspace(1, 1/N, N) shifted by "
        "compute_empirical_mu(rows*cols, N), then a final 0)",
        "timesteps": "scheduler.timesteps",
    }
    for i in range(steps):
        meanings[f"latents_step_{i}"] = f"packed latents after scheduler step {i} (callback_on_step_end)"
    rows_desc = [(k, list(v.shape), "F32", meanings.get(k, "")) for k, v in sorted(t.items())]
    README.append((fn, f"Flux2Pipeline, {model_name}, {steps} steps, {16 * rows}x{16 * cols} pixels "
                   f"(grid {rows}x{cols}), T={T}.", rows_desc))


def write_readme():
    lines = ["# FLUX.2 transformer goldens", "",
             "Written by `tests/golden/make_flux2.py` (see its docstring for the models and inputs).", ""]
    for fn, desc, rows in README:
        lines += [f"### {fn}", "", desc, "", "| tensor | shape | dtype | meaning |", "|---|---|---|---|"]
        lines += [f"| `{k}` | {s} | {d} | {m} |" for k, s, d, m in rows]
        lines.append("")
    with open(os.path.join(GOLD, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines))


def main():
    gc.setup()
    for d in ("tiny-g", "tiny-nog", "tiny-bf16", "golden"):
        shutil.rmtree(os.path.join(OUT, d), ignore_errors=True)
    os.makedirs(GOLD)
    build_models()
    fwd_case("tiny-g", 16, 16, 8, seed=3000)
    fwd_case("tiny-g", 15, 13, 7, seed=3100)
    fwd_case("tiny-nog", 8, 6, 5, seed=3200)
    fwd_case("tiny-bf16", 15, 13, 7, seed=3300)
    loop_case("tiny-g", 16, 16, 8, seed=4000)
    loop_case("tiny-g", 15, 13, 7, seed=4100)
    write_readme()
    gc.list_written(OUT)


if __name__ == "__main__":
    main()
