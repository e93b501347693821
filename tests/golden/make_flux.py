"""Golden data for the FLUX.1 transformer and the FluxPipeline denoising loop (real Diffusers).

Run from the repository root (CPU only, ~1 min on 2 cores):

    /opt/goldenv/bin/python tests/golden/make_flux.py

Run order: independent of the other generators (reads nothing they write); see tests/golden/README.md.

Environment used: torch 2.15 (CPU), diffusers 0.42.1, safetensors, numpy 2.x.
Not run in CI; the outputs are committed. Re-running regenerates every file bit-identically
(fixed seeds, 2 threads, torch.use_deterministic_algorithms).

What it writes (it first deletes tests/data/flux1/ entirely and rebuilds it):

  tests/data/flux1/tiny-g/      FluxTransformer2DModel, 2 double + 1 single block, guidance_embeds=True, f32
  tests/data/flux1/tiny-nog/    1 double + 1 single block, guidance_embeds=False, f32, SHARDED
                                (save_pretrained(max_shard_size=SHARD_SIZE) -> N >= 3 (asserted)
                                diffusion_pytorch_model-0000i-of-0000N.safetensors + ...index.json)
  tests/data/flux1/tiny-bf16/   1 double + 1 single block, guidance_embeds=True, bf16 weights
  tests/data/flux1/golden/fwd_<model>_<rows>x<cols>_t<T>.safetensors    single forward passes
  tests/data/flux1/golden/loop_<model>_<rows>x<cols>_t<T>[_bf16].safetensors   FluxPipeline.__call__, 4 steps
                                (_bf16: the pipeline in bf16, tiny-bf16 loaded with torch_dtype=bfloat16)
  tests/data/flux1/golden/README.md                                     every file / tensor described

Common config: patch_size 1, in_channels 64, 12 heads x head_dim 8 (inner 96), joint_attention_dim 32,
pooled_projection_dim 32, axes_dims_rope (2, 2, 4).

Weights: constructed after torch.manual_seed(<seed>), then EVERY parameter is re-initialised by
golden_common.reinit_transformer (Linear weights N(0, 1/fan_in), AdaLN-modulation Linears
N(0, (1.5)^2/fan_in) so that shift/scale/gate are O(0.5-1), biases N(0, 0.1^2), RMSNorm weights
N(1, 0.2^2)). The resulting outputs have std ~1.2-1.6 (printed in the log).

The denoising loop runs FluxPipeline.__call__ itself with text_encoder / tokenizer / text_encoder_2 /
tokenizer_2 = None. This needs no patching: encode_prompt only touches the tokenizers/encoders when
prompt_embeds is None, and falls back to transformer.dtype for the text ids when text_encoder is None.
The pipeline's vae is a tiny, never-used AutoencoderKL (4 block_out_channels -> vae_scale_factor 8),
since output_type="latent" skips decoding. `mu` is captured by wrapping scheduler.set_timesteps on the
instance (functools.wraps keeps the signature retrieve_timesteps inspects); noise_pred_step_0 by a forward
hook on the transformer; the latents after each step by callback_on_step_end.
"""

import sys

sys.dont_write_bytecode = True  # keep tests/golden free of __pycache__

import functools
import os
import shutil

import torch

import golden_common as gc
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

OUT = gc.repo_path("tests", "data", "flux1")
GOLD = os.path.join(OUT, "golden")

COMMON = dict(
    patch_size=1,
    in_channels=64,
    num_attention_heads=12,
    attention_head_dim=8,
    joint_attention_dim=32,
    pooled_projection_dim=32,
    axes_dims_rope=(2, 2, 4),
)

MODELS = {
    # name: (num_layers, num_single_layers, guidance_embeds, dtype, seed)
    "tiny-g": (2, 1, True, torch.float32, 101),
    "tiny-nog": (1, 1, False, torch.float32, 102),
    "tiny-bf16": (1, 1, True, torch.bfloat16, 103),
}

# FLUX.1-dev scheduler_config.json values (others are class defaults).
SCHED_CFG = dict(
    num_train_timesteps=1000,
    shift=3.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=1.15,
    base_image_seq_len=256,
    max_image_seq_len=4096,
)

# tiny-nog (~2.2 MB of float32) is saved sharded; shards are cut at this size (Diffusers: 1 KB = 1000 B),
# which gives 5 shards; build_models() asserts there are at least 3.
SHARD_SIZE = "500KB"
MIN_SHARDS = 3

MOD_GAIN = 1.5
TIMESTEP = 0.73
GUIDANCE = 3.5

README = []  # (filename, [(tensor, shape, dtype, meaning)])


def build_models():
    for name, (nl, ns, g, dtype, seed) in MODELS.items():
        torch.manual_seed(seed)
        m = FluxTransformer2DModel(num_layers=nl, num_single_layers=ns, guidance_embeds=g, **COMMON)
        gc.reinit_transformer(m, seed, mod_gain=MOD_GAIN)
        m = m.to(dtype)
        path = os.path.join(OUT, name)
        kw = {"max_shard_size": SHARD_SIZE} if name == "tiny-nog" else {}
        m.save_pretrained(path, safe_serialization=True, **kw)
        if name == "tiny-nog":
            shards = [f for f in os.listdir(path) if f.startswith("diffusion_pytorch_model-")]
            assert len(shards) >= MIN_SHARDS, shards
        n = sum(p.numel() for p in m.parameters())
        gc.log(f"saved {name}: {n} params, dtype {dtype}, files {sorted(os.listdir(path))}")


def load(name, dtype=None):
    path = os.path.join(OUT, name)
    m = FluxTransformer2DModel.from_pretrained(path, torch_dtype=dtype) if dtype else FluxTransformer2DModel.from_pretrained(path)
    m.eval()
    return m


def img_ids(rows, cols, dtype=torch.float32):
    return FluxPipeline._prepare_latent_image_ids(1, rows, cols, torch.device("cpu"), dtype)


def describe(tensors, meanings):
    rows = []
    for k in sorted(tensors):
        t = tensors[k]
        rows.append((k, list(t.shape), "F32", meanings.get(k, "")))
    return rows


def fwd_case(model_name, rows, cols, T, seed):
    nl, ns, guided, wdtype, _ = MODELS[model_name]
    S = rows * cols
    hs = gc.randn((1, S, 64), seed + 1)
    ehs = gc.randn((1, T, 32), seed + 2)
    pooled = gc.randn((1, 32), seed + 3)
    ts = torch.tensor([TIMESTEP], dtype=torch.float32)
    gd = torch.tensor([GUIDANCE], dtype=torch.float32) if guided else None
    iids = img_ids(rows, cols)
    tids = torch.zeros(T, 3)

    def run(model, dt):
        with torch.no_grad():
            out = model(
                hidden_states=hs.to(dt),
                encoder_hidden_states=ehs.to(dt),
                pooled_projections=pooled.to(dt),
                timestep=ts.to(dt),
                img_ids=iids.to(dt),
                txt_ids=tids.to(dt),
                # The pipeline always builds guidance as float32 (torch.full(..., dtype=float32)); the model casts
                # it to hidden_states.dtype itself.
                guidance=gd,
                return_dict=True,
            ).sample
        return out

    if wdtype == torch.bfloat16:
        # `output`: bf16 checkpoint loaded as stored (torch_dtype=bfloat16), then upcast with .to(float32).
        m32 = load(model_name, torch.bfloat16)
        assert next(m32.parameters()).dtype == torch.bfloat16
        m32 = m32.to(torch.float32)
        out = run(m32, torch.float32)
        mb = load(model_name, torch.bfloat16)
        out_bf16 = run(mb, torch.bfloat16)
        assert out_bf16.dtype == torch.bfloat16
    else:
        out = run(load(model_name), torch.float32)
        out_bf16 = None

    t = {
        "hidden_states": hs,
        "encoder_hidden_states": ehs,
        "pooled_projections": pooled,
        "timestep": ts,
        "img_ids": iids,
        "txt_ids": tids,
        "output": out,
    }
    if guided:
        t["guidance"] = gd
    if out_bf16 is not None:
        t["output_bf16"] = out_bf16.float()
    fn = f"fwd_{model_name}_{rows}x{cols}_t{T}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), t)
    msg = f"{fn}: output std {out.std().item():.4f} mean {out.mean().item():+.4f} absmax {out.abs().max().item():.3f}"
    if out_bf16 is not None:
        d = (out_bf16.float() - out).abs()
        msg += f" | output_bf16 std {out_bf16.float().std().item():.4f}, max|bf16-f32| {d.max().item():.4f}"
        # Diagnostic only (not stored): most of that difference is the bf16 rounding of timestep/guidance
        # (the model sees t = bf16(bf16(0.73)*1000) = 732 and g = bf16(3500) = 3504 instead of 730 / 3500).
        bf = lambda x: x.to(torch.bfloat16).float()  # noqa: E731
        with torch.no_grad():
            ref = m32(
                hidden_states=bf(hs), encoder_hidden_states=bf(ehs), pooled_projections=bf(pooled),
                timestep=bf(bf(ts) * 1000) / 1000, img_ids=iids, txt_ids=tids,
                guidance=bf(gd * 1000) / 1000, return_dict=True,
            ).sample
        msg += (f"\n    (f32 model with bf16-rounded inputs and t=732, g=3504: max|output_bf16 - that| "
                f"{(out_bf16.float() - ref).abs().max().item():.4f}, rms {(out_bf16.float() - ref).pow(2).mean().sqrt().item():.4f})")
    gc.log(msg)
    assert torch.isfinite(out).all()

    meanings = {
        "hidden_states": "packed image latents fed to the model (random normal)",
        "encoder_hidden_states": "text-token embeddings (random normal)",
        "pooled_projections": "pooled text embedding (random normal)",
        "timestep": f"timestep as the pipeline passes it (sigma = t/1000), {TIMESTEP}",
        "guidance": f"guidance scale {GUIDANCE} (model multiplies by 1000 itself)",
        "img_ids": "FluxPipeline._prepare_latent_image_ids: [0, row, col] per token, row-major",
        "txt_ids": "zeros",
        "output": "model(...).sample, float32 compute"
        + (" (bf16 checkpoint upcast with .to(torch.float32))" if wdtype == torch.bfloat16 else ""),
        "output_bf16": "model loaded with torch_dtype=bfloat16; hidden_states, encoder_hidden_states, "
        "pooled_projections, timestep, img_ids, txt_ids cast to bfloat16; guidance passed as float32 "
        "(as FluxPipeline does); result cast to float32 for storage",
    }
    README.append((fn, f"Forward pass of {model_name}, grid {rows} rows x {cols} cols (S_img={S}), T={T}.",
                   describe(t, meanings)))


def tiny_pipeline_vae():
    torch.manual_seed(7)
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=(32, 32, 32, 32),
        layers_per_block=1,
        latent_channels=16,
        norm_num_groups=32,
        use_quant_conv=False,
        use_post_quant_conv=False,
        scaling_factor=0.3611,
        shift_factor=0.1159,
    )


def loop_case(model_name, rows, cols, T, seed, steps=4, guidance_scale=GUIDANCE, dtype=None):
    """dtype=torch.bfloat16: the pipeline in bf16 (transformer loaded with torch_dtype=bfloat16; the
    pipeline casts latents and prompt embeds to it, keeps the latents in it between steps)."""
    S = rows * cols
    height, width = 16 * rows, 16 * cols
    transformer = load(model_name, dtype)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHED_CFG)
    pipe = FluxPipeline(
        scheduler=scheduler,
        vae=tiny_pipeline_vae(),
        text_encoder=None,
        tokenizer=None,
        text_encoder_2=None,
        tokenizer_2=None,
        transformer=transformer,
    )
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor == 8

    captured = {}
    orig_set = scheduler.set_timesteps

    @functools.wraps(orig_set)
    def set_timesteps_wrapper(*a, **kw):
        captured["mu"] = kw.get("mu")
        captured["sigmas_in"] = kw.get("sigmas")
        return orig_set(*a, **kw)

    scheduler.set_timesteps = set_timesteps_wrapper

    noise_preds = []
    hook = transformer.register_forward_hook(lambda mod, args, out: noise_preds.append(out[0].detach().clone()))

    step_latents = []

    def on_step_end(p, i, t, kw):
        step_latents.append(kw["latents"].detach().clone())
        return {}

    latents_init = gc.randn((1, S, 64), seed + 1)
    prompt_embeds = gc.randn((1, T, 32), seed + 2)
    pooled = gc.randn((1, 32), seed + 3)
    if dtype is not None:
        # a bf16 text encoder's outputs: encode_prompt does not cast given embeddings
        prompt_embeds, pooled = prompt_embeds.to(dtype), pooled.to(dtype)

    with torch.no_grad():
        res = pipe(
            prompt_embeds=prompt_embeds.clone(),
            pooled_prompt_embeds=pooled.clone(),
            latents=latents_init.clone(),
            height=height,
            width=width,
            num_inference_steps=steps,
            guidance_scale=guidance_scale,
            output_type="latent",
            callback_on_step_end=on_step_end,
            return_dict=True,
        )
    hook.remove()
    final = res.images
    assert len(step_latents) == steps and len(noise_preds) == steps
    assert torch.equal(final, step_latents[-1])

    mu = captured["mu"]
    t = {
        "latents_init": latents_init,
        "prompt_embeds": prompt_embeds,
        "pooled_prompt_embeds": pooled,
        "height": gc.scalar(height),
        "width": gc.scalar(width),
        "steps": gc.scalar(steps),
        "guidance_scale": gc.scalar(guidance_scale),
        "mu": gc.scalar(mu),
        "mu_f64": torch.tensor([mu], dtype=torch.float64),
        "sigmas": scheduler.sigmas.clone(),
        "timesteps": scheduler.timesteps.clone(),
        "noise_pred_step_0": noise_preds[0],
    }
    for i, l in enumerate(step_latents):
        t[f"latents_step_{i}"] = l
    fn = f"loop_{model_name}_{rows}x{cols}_t{T}{'_bf16' if dtype == torch.bfloat16 else ''}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), t, keep_dtype=("mu_f64",))
    gc.log(
        f"{fn}: mu={mu!r} sigmas={scheduler.sigmas.tolist()} timesteps={scheduler.timesteps.tolist()}\n"
        f"    noise_pred_step_0 std {noise_preds[0].std().item():.4f}; latents std per step "
        + ", ".join(f"{l.std().item():.4f}" for l in step_latents)
    )

    meanings = {
        "latents_init": "initial packed latents passed as latents= (random normal)",
        "prompt_embeds": "passed as prompt_embeds=",
        "pooled_prompt_embeds": "passed as pooled_prompt_embeds=",
        "height": f"image height in pixels passed to the pipeline ({height})",
        "width": f"image width in pixels passed to the pipeline ({width})",
        "steps": "num_inference_steps",
        "guidance_scale": "guidance_scale (embedded guidance; used only if the model has guidance_embeds)",
        "mu": "calculate_shift(image_seq_len=S_img, 256, 4096, 0.5, 1.15) computed by the pipeline as a Python float64, rounded to float32",
        "mu_f64": "the same mu as the Python float64 the pipeline computed (F64 tensor)",
        "sigmas": "scheduler.sigmas after set_timesteps (N shifted sigmas + final 0)",
        "timesteps": "scheduler.timesteps (= sigmas[:N] * 1000, float32)",
        "noise_pred_step_0": "transformer output at step 0 (forward hook)",
    }
    for i in range(steps):
        meanings[f"latents_step_{i}"] = f"packed latents after scheduler step {i} (callback_on_step_end)"
    rows_desc = describe(t, meanings)
    rows_desc = [(k, s, "F64" if k == "mu_f64" else d, m) for (k, s, d, m) in rows_desc]
    in_dtype = (" The pipeline in bf16 (torch_dtype=bfloat16: latents, prompt embeds and every latent "
                "after a step held in bf16; stored here as float32)." if dtype == torch.bfloat16 else "")
    README.append((fn, f"FluxPipeline.__call__ with {model_name}, {height}x{width} px (grid {rows}x{cols}, "
                   f"S_img={S}), T={T}, {steps} steps, guidance_scale {guidance_scale}, output_type='latent'."
                   + in_dtype,
                   rows_desc))


def write_readme():
    n_shards = len([f for f in os.listdir(os.path.join(OUT, "tiny-nog")) if f.startswith("diffusion_pytorch_model-")])
    lines = [
        "# FLUX.1 golden data",
        "",
        "Generated by `tests/golden/make_flux.py` (real Diffusers 0.42.1, torch CPU, float32 unless stated).",
        "Regenerate with `/opt/goldenv/bin/python tests/golden/make_flux.py` from the repository root;",
        "re-runs are bit-identical. All tensors are little-endian safetensors, contiguous; scalars are",
        "float32 tensors of shape [1]. Batch size is always 1.",
        "",
        "## Models (in tests/data/flux1/)",
        "",
        "Common config: patch_size 1, in_channels 64 (out_channels = 64), 12 heads x head_dim 8 (inner 96),",
        "joint_attention_dim 32, pooled_projection_dim 32, axes_dims_rope (2, 2, 4). Random weights",
        "(see make_flux.py docstring for the init).",
        "",
        "| folder | double blocks | single blocks | guidance_embeds | weights | files |",
        "|---|---|---|---|---|---|",
        "| tiny-g | 2 | 1 | True | F32 | config.json, diffusion_pytorch_model.safetensors |",
        f"| tiny-nog | 1 | 1 | False | F32 | config.json, sharded ({n_shards} shards, max_shard_size {SHARD_SIZE!r}): diffusion_pytorch_model-0000i-of-0000{n_shards}.safetensors + diffusion_pytorch_model.safetensors.index.json |",
        "| tiny-bf16 | 1 | 1 | True | BF16 | config.json, diffusion_pytorch_model.safetensors |",
        "",
        "## Conventions",
        "",
        "- Grid `RxC` in a file name = R rows x C columns of image tokens (packed 2x2 latent patches);",
        "  S_img = R*C; the image is 16R x 16C pixels; the unpacked latent grid is 2R x 2C.",
        "- `img_ids[k] = [0, k // C, k % C]`, `txt_ids = 0` (shape [T, 3]).",
        f"- `timestep` is already divided by 1000 ({TIMESTEP}); `guidance` is {GUIDANCE}. The model multiplies",
        "  both by 1000 internally.",
        "- bf16 run (`output_bf16`): the pipeline casts latents / prompt embeds / ids to bf16, the timestep",
        "  is bf16 (the pipeline computes `t.to(bf16) / 1000` in bf16; here `bf16(0.73)` is passed), and",
        "  `guidance` stays a float32 tensor (the model then does `guidance.to(bf16) * 1000` = 3504 in bf16).",
        "  Inside the model the timestep becomes `bf16(bf16(0.73) * 1000)` = 732 (not 730). With random",
        "  weights the sinusoidal embedding is very sensitive to this, so `output` and `output_bf16` differ",
        "  by up to ~2.9; an f32 run with the same rounded t/g and bf16-rounded inputs is within ~0.05",
        "  (rms ~0.011) of `output_bf16`, i.e. that is the size of the pure bf16 arithmetic error.",
        "- Scheduler: FlowMatchEulerDiscreteScheduler with FLUX.1-dev settings: shift 3.0,",
        "  use_dynamic_shifting True, base_shift 0.5, max_shift 1.15, base_image_seq_len 256,",
        "  max_image_seq_len 4096. The pipeline passes `sigmas = np.linspace(1, 1/N, N)` (float64, then",
        "  cast to float32 inside set_timesteps) and `mu = m*S_img + b` with m = 0.65/3840, b = 0.5 - 256*m",
        "  (Python float64). The exponential time shift `exp(mu) / (exp(mu) + (1/s - 1))` is evaluated",
        "  by numpy in float32 (exp(mu) is a Python float and is demoted to float32 under NEP 50);",
        "  evaluating it in float64 and rounding at the end gives different float32 sigmas.",
        "  `timesteps = sigmas * 1000` in float32 torch; `sigmas` gets a trailing 0.",
        "- Step: `latents = latents + (sigma[i+1] - sigma[i]) * noise_pred` in float32.",
        "- None components: FluxPipeline is built with text_encoder / tokenizer / text_encoder_2 /",
        "  tokenizer_2 = None; nothing needs patching because encode_prompt skips them when",
        "  prompt_embeds is given (txt_ids dtype falls back to transformer.dtype).",
        "",
        "## Files",
        "",
    ]
    for fn, desc, rows in README:
        lines.append(f"### {fn}")
        lines.append("")
        lines.append(desc)
        lines.append("")
        lines.append("| tensor | shape | dtype | meaning |")
        lines.append("|---|---|---|---|")
        for k, shape, dt, m in rows:
            lines.append(f"| `{k}` | {shape} | {dt} | {m} |")
        lines.append("")
    with open(os.path.join(GOLD, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines))


def main():
    gc.setup()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(GOLD)
    build_models()

    fwd_case("tiny-g", 16, 16, 8, seed=1000)
    fwd_case("tiny-g", 15, 13, 7, seed=1100)
    fwd_case("tiny-nog", 16, 16, 8, seed=1200)
    fwd_case("tiny-bf16", 15, 13, 7, seed=1300)

    loop_case("tiny-g", 16, 16, 8, seed=2000)
    loop_case("tiny-g", 15, 13, 7, seed=2100)
    loop_case("tiny-nog", 16, 16, 8, seed=2200)
    loop_case("tiny-bf16", 15, 13, 7, seed=2300, dtype=torch.bfloat16)

    write_readme()
    gc.list_written(OUT)


if __name__ == "__main__":
    main()
