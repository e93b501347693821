"""Golden data for the FLUX.2 transformer (real Diffusers: Flux2Transformer2DModel).

Run from the repository root (CPU only, well under a minute on 2 cores):

    /opt/goldenv/bin/python tests/golden/make_flux2.py

Run order: independent of the other generators (reads nothing they write); see tests/golden/README.md.

Environment used: torch (CPU), diffusers 0.42.1, safetensors, numpy 2.x. Not run in CI; the outputs are
committed. Re-running regenerates every file bit-identically (fixed seeds, 2 threads,
torch.use_deterministic_algorithms).

What it writes (it first deletes tests/data/flux2/{tiny-g,tiny-nog,tiny-bf16,golden,pipeline}; tests/data/flux2/tiny/
belongs to make_other.py and is left alone):
  tests/data/flux2/tiny-g/      Flux2Transformer2DModel, 2 double + 2 single blocks, guidance_embeds=True, f32
  tests/data/flux2/tiny-nog/    1 double + 1 single block, guidance_embeds=False, f32
  tests/data/flux2/tiny-bf16/   1 double + 1 single block, guidance_embeds=True, bf16 weights
  tests/data/flux2/golden/fwd_<model>_<rows>x<cols>_t<T>.safetensors   single forward passes
  tests/data/flux2/golden/loop_<model>_<rows>x<cols>_t<T>.safetensors  Flux2Pipeline.__call__, 4 steps,
                                output_type="latent" (vae, text_encoder and tokenizer None: the pipeline
                                then takes vae_scale_factor 8, and encode_prompt only builds the text ids)
  tests/data/flux2/golden/README.md                                    every file / tensor described
  tests/data/flux2/pipeline/    a Flux2Pipeline folder: model_index.json, transformer/ (1 double + 1 single
                                block, bf16), vae/ (a tiny AutoencoderKLFlux2: 3 blocks (16, 16, 32), 4 latent
                                channels, its batch norm's running statistics drawn at random), scheduler/,
                                prompts/cat.safetensors (prompt_embeds [1, 12, 24]); text_encoder and
                                tokenizer null (FLUX.2's text comes as embeddings)
  tests/data/flux2/golden/pipeline_cat_96x80.safetensors    Flux2Pipeline.__call__ to pixels
  tests/data/flux2/golden/vae_decode_7x5.safetensors        the pipeline's VAE alone on random latents

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
from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler, Flux2Pipeline, Flux2Transformer2DModel

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


def loop_case(model_name, rows, cols, T, seed, steps=4, dtype=None):
    """dtype bfloat16: the pipeline in bf16 (the transformer loaded with torch_dtype=bfloat16, the prompt
    embeddings in bf16, so the latents are held in it between steps)."""
    transformer = load(model_name, dtype)
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
    pe_in = prompt_embeds.to(dtype) if dtype is not None else prompt_embeds
    with torch.no_grad():
        res = pipe(prompt_embeds=pe_in.clone(), latents=latents_4d.clone(), height=16 * rows,
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
    fn = f"loop_{model_name}_{rows}x{cols}_t{T}{'_bf16' if dtype is not None else ''}.safetensors"
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
                   f"(grid {rows}x{cols}), T={T}{', the pipeline in bf16' if dtype is not None else ''}.",
                   rows_desc))


PIPE = os.path.join(OUT, "pipeline")


def build_pipeline():
    torch.manual_seed(204)
    tf = Flux2Transformer2DModel(num_layers=1, num_single_layers=1, guidance_embeds=True, **COMMON)
    gc.reinit_transformer(tf, 204, mod_gain=MOD_GAIN)
    tf = tf.to(torch.bfloat16)
    torch.manual_seed(205)
    vae = AutoencoderKLFlux2(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 3,
                             up_block_types=["UpDecoderBlock2D"] * 3, block_out_channels=(16, 16, 32),
                             layers_per_block=1, latent_channels=IN_CH // 4, norm_num_groups=8,
                             sample_size=96)
    gc.reinit_vae(vae, 205, gain=1.0, conv_out_gain=0.5)
    with torch.no_grad():  # the statistics a trained VAE carries: every channel its own
        g = torch.Generator().manual_seed(206)
        vae.bn.running_mean.copy_(torch.randn(vae.bn.running_mean.shape, generator=g) * 0.3)
        vae.bn.running_var.copy_(torch.rand(vae.bn.running_var.shape, generator=g) * 1.5 + 0.5)
    pipe = Flux2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHED_CFG), vae=vae, text_encoder=None,
                         tokenizer=None, transformer=tf)
    pipe.save_pretrained(PIPE, safe_serialization=True)
    gc.save_tensors(os.path.join(PIPE, "prompts", "cat.safetensors"),
                    {"prompt_embeds": gc.randn((1, 12, JOINT), 207)})
    gc.log(f"saved the Flux2Pipeline folder: vae_scale_factor {pipe.vae_scale_factor}")


def pipeline_case(rows, cols, seed):
    pipe = Flux2Pipeline.from_pretrained(PIPE, text_encoder=None, tokenizer=None)
    pipe.transformer = pipe.transformer.to(torch.float32)  # bf16 weights as stored, f32 compute
    pipe.set_progress_bar_config(disable=True)
    from safetensors.torch import load_file
    pe = load_file(os.path.join(PIPE, "prompts", "cat.safetensors"))["prompt_embeds"]
    finals = []

    def on_step_end(p, i, t, kw):
        finals.append(kw["latents"].detach().clone())
        return {}

    f = 2 * pipe.vae_scale_factor
    latents_4d = gc.randn((1, IN_CH, rows, cols), seed)
    with torch.no_grad():
        img = pipe(prompt_embeds=pe, latents=latents_4d.clone(), height=f * rows, width=f * cols,
                   num_inference_steps=4, guidance_scale=GUIDANCE, output_type="np",
                   callback_on_step_end=on_step_end).images[0]
    u8 = torch.from_numpy((img * 255).round().astype("uint8"))
    t = {"latents_init": Flux2Pipeline._pack_latents(latents_4d), "latents_final": finals[-1],
         "image_u8": u8}
    fn = f"pipeline_cat_{f * rows}x{f * cols}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), t, keep_dtype=("image_u8",))
    gc.log(f"{fn}: image mean {img.mean():.4f} std {img.std():.4f}")
    README.append((fn, f"Flux2Pipeline.from_pretrained(tests/data/flux2/pipeline) (transformer bf16 as stored, then "
                   f".to(float32); VAE f32), prompt_embeds of prompts/cat.safetensors, height {f * rows}, width "
                   f"{f * cols}, 4 steps, guidance_scale {GUIDANCE}, latents = latents_init unpacked, output_type np.",
                   [("latents_init", list(t["latents_init"].shape), "F32", "initial packed latents"),
                    ("latents_final", list(finals[-1].shape), "F32", "packed latents after the last step"),
                    ("image_u8", list(u8.shape), "U8", "(image * 255).round() of the [0, 1] output, HWC")]))


def vae_case(rows, cols, seed):
    vae = AutoencoderKLFlux2.from_pretrained(os.path.join(PIPE, "vae")).eval()
    z = gc.randn((1, IN_CH // 4, rows, cols), seed)
    with torch.no_grad():
        x = vae.decode(z, return_dict=False)[0]
    fn = f"vae_decode_{rows}x{cols}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), {"latents": z, "image": x})
    gc.log(f"{fn}: image std {x.std().item():.4f}")
    README.append((fn, f"AutoencoderKLFlux2.decode of the pipeline folder's VAE on random latents ({rows} x {cols}; "
                   f"the decoder alone: the batch-norm denormalisation is the pipeline's).",
                   [("latents", list(z.shape), "F32", "z"), ("image", list(x.shape), "F32", "decode(z)")]))


def main():
    gc.setup()
    for d in ("tiny-g", "tiny-nog", "tiny-bf16", "golden", "pipeline"):
        shutil.rmtree(os.path.join(OUT, d), ignore_errors=True)
    os.makedirs(GOLD)
    build_models()
    fwd_case("tiny-g", 16, 16, 8, seed=3000)
    fwd_case("tiny-g", 15, 13, 7, seed=3100)
    fwd_case("tiny-nog", 8, 6, 5, seed=3200)
    fwd_case("tiny-bf16", 15, 13, 7, seed=3300)
    loop_case("tiny-g", 16, 16, 8, seed=4000)
    loop_case("tiny-g", 15, 13, 7, seed=4100)
    loop_case("tiny-bf16", 15, 13, 7, seed=4200, dtype=torch.bfloat16)
    build_pipeline()
    pipeline_case(12, 10, seed=5000)
    vae_case(7, 5, seed=5100)
    gc.write_readme(os.path.join(GOLD, "README.md"), "FLUX.2 transformer goldens", "tests/golden/make_flux2.py", README)
    gc.list_written(OUT)


if __name__ == "__main__":
    main()
