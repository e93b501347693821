"""Golden data for the Qwen-Image transformer (real Diffusers: QwenImageTransformer2DModel).

Run from the repository root (CPU only, seconds on 2 cores):

    /opt/goldenv/bin/python tests/golden/make_qwen.py

Run order: independent of the other generators; see tests/golden/README.md. Environment: torch (CPU), diffusers
0.42.1. Not run in CI; the outputs are committed; re-running regenerates every file bit-identically.

What it writes (it first deletes tests/data/qwenimage/{tiny-g,tiny-bf16,golden,pipeline}; tests/data/qwenimage/tiny/ is
make_other.py's):
  tests/data/qwenimage/tiny-g/     QwenImageTransformer2DModel, 2 blocks, f32
  tests/data/qwenimage/tiny-bf16/  1 block, bf16 weights
  tests/data/qwenimage/golden/fwd_<model>_<rows>x<cols>_t<T>[_mask].safetensors   single forward passes
  tests/data/qwenimage/golden/loop_tiny-g_<rows>x<cols>_t<T>[_cfg].safetensors   QwenImagePipeline.__call__, 4
                                   steps, output_type "latent" (vae, text_encoder, tokenizer None: vae_scale_factor
                                   8); _cfg: true_cfg_scale 4 with negative prompt embeddings (the pipeline's
                                   renormalised combination)
  tests/data/qwenimage/golden/README.md
  tests/data/qwenimage/pipeline/   a QwenImagePipeline folder: model_index.json, transformer/ (1 block, bf16),
                                   vae/ (a tiny AutoencoderKLQwenImage, torch's own initialisation, seeded),
                                   scheduler/ (SCHED_CFG), prompts/cat.safetensors (prompt_embeds [1, 9, 24] and a
                                   prompt_embeds_mask of 7 ones then 2 zeros) and prompts/blurry.safetensors (7
                                   tokens, no mask); text_encoder and tokenizer null
  tests/data/qwenimage/golden/pipeline_cat_128x96_cfg.safetensors   QwenImagePipeline.from_pretrained(pipeline)
                                   from those prompts, true CFG 4, 4 steps: the latents and the 8-bit image
  tests/data/qwenimage/golden/vae_decode_7x5.safetensors   the VAE alone on random latents

Common config: patch_size 2, in_channels 16 (4 latent channels packed 2 x 2), out_channels 4 (proj_out gives
2 x 2 x 4 = 16), 12 heads x head_dim 8 (inner 96), joint_attention_dim 24, axes_dims_rope (2, 2, 4). Inputs as
QwenImagePipeline passes them: img_shapes [(1, rows, cols)] (the packed token grid), timestep t/1000, the
prompt embeddings, and encoder_hidden_states_mask (the _mask cases: the last two text tokens masked out, as a
padded prompt's would be). Weights: torch.manual_seed(<seed>), then golden_common.reinit_transformer (Linear
weights N(0, 1/fan_in), img_mod / txt_mod / norm_out N(0, 1.5^2/fan_in), biases N(0, 0.1^2), norm weights
N(1, 0.2^2)).
"""

import sys

sys.dont_write_bytecode = True

import os
import shutil

import torch

import golden_common as gc
from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline,
                       QwenImageTransformer2DModel)

OUT = gc.repo_path("tests", "data", "qwenimage")
GOLD = os.path.join(OUT, "golden")
IN_CH, JOINT = 16, 24
COMMON = dict(patch_size=2, in_channels=IN_CH, out_channels=4, num_attention_heads=12, attention_head_dim=8,
              joint_attention_dim=JOINT, axes_dims_rope=(2, 2, 4))
MODELS = {"tiny-g": (2, torch.float32, 301), "tiny-bf16": (1, torch.bfloat16, 303)}
TIMESTEP = 0.73
README = []


def build_models():
    for name, (nl, dtype, seed) in MODELS.items():
        torch.manual_seed(seed)
        m = QwenImageTransformer2DModel(num_layers=nl, **COMMON)
        gc.reinit_transformer(m, seed, mod_gain=1.5)
        m.to(dtype).save_pretrained(os.path.join(OUT, name), safe_serialization=True)
        gc.log(f"saved {name}: {sum(p.numel() for p in m.parameters())} params, {dtype}")


def load(name, dtype=None):
    path = os.path.join(OUT, name)
    m = QwenImageTransformer2DModel.from_pretrained(path, torch_dtype=dtype) if dtype else \
        QwenImageTransformer2DModel.from_pretrained(path)
    return m.eval()


def fwd_case(model_name, rows, cols, T, seed, masked=False):
    _, wdtype, _ = MODELS[model_name]
    S = rows * cols
    hs = gc.randn((1, S, IN_CH), seed + 1)
    ehs = gc.randn((1, T, JOINT), seed + 2)
    mask = torch.ones(1, T, dtype=torch.int64)
    if masked:
        mask[:, -2:] = 0
    ts = torch.tensor([TIMESTEP], dtype=torch.float32)

    def run(model, dt):
        with torch.no_grad():
            return model(hidden_states=hs.to(dt), encoder_hidden_states=ehs.to(dt),
                         encoder_hidden_states_mask=mask if masked else None, timestep=ts.to(dt),
                         img_shapes=[(1, rows, cols)], return_dict=True).sample

    if wdtype == torch.bfloat16:
        out = run(load(model_name, torch.bfloat16).to(torch.float32), torch.float32)
        out_bf16 = run(load(model_name, torch.bfloat16), torch.bfloat16)
    else:
        out = run(load(model_name), torch.float32)
        out_bf16 = None
    t = {"hidden_states": hs, "encoder_hidden_states": ehs, "timestep": ts, "output": out,
         "grid": torch.tensor([rows, cols], dtype=torch.float32)}
    if masked:
        t["encoder_hidden_states_mask"] = mask.float()
    if out_bf16 is not None:
        t["output_bf16"] = out_bf16.float()
    fn = f"fwd_{model_name}_{rows}x{cols}_t{T}{'_mask' if masked else ''}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), t)
    gc.log(f"{fn}: output std {out.std().item():.4f}")
    assert torch.isfinite(out).all()
    meanings = {
        "hidden_states": "packed image latents (random normal)",
        "encoder_hidden_states": "prompt embeddings (random normal)",
        "encoder_hidden_states_mask": "1 for a text token, 0 for padding (the last two)",
        "timestep": f"timestep as the pipeline passes it (t/1000), {TIMESTEP}",
        "grid": "img_shapes[0][1:]: the packed token grid, rows and cols",
        "output": "model(...).sample, float32"
        + (" (bf16 checkpoint upcast with .to(torch.float32))" if wdtype == torch.bfloat16 else ""),
        "output_bf16": "the model and its inputs in bfloat16, the result cast to float32",
    }
    README.append((fn, f"{model_name}, grid {rows} x {cols} (S_img={S}), T={T}{', masked' if masked else ''}.",
                   [(k, list(v.shape), "F32", meanings.get(k, "")) for k, v in sorted(t.items())]))


# A scheduler configured as Qwen-Image's (dynamic shifting, exponential; the pipeline's calculate_shift reads
# base/max shift and lengths from it; shift_terminal stretches the sigmas to end at 0.02).
SCHED_CFG = dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9,
                 base_image_seq_len=256, max_image_seq_len=8192, shift_terminal=0.02,
                 time_shift_type="exponential")


def loop_case(rows, cols, T, seed, cfg, model="tiny-g", dtype=None):
    """dtype bfloat16: the pipeline in bf16 (the transformer in bf16, the prompt embeddings in bf16)."""
    pipe = QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHED_CFG), vae=None, text_encoder=None,
                             tokenizer=None, transformer=load(model, dtype))
    pipe.set_progress_bar_config(disable=True)
    assert pipe.vae_scale_factor == 8
    steps_seen = []

    def on_step_end(p, i, t, kw):
        steps_seen.append(kw["latents"].detach().clone())
        return {}

    lat = gc.randn((1, rows * cols, IN_CH), seed + 1)
    pe = gc.randn((1, T, JOINT), seed + 2)
    ne = gc.randn((1, T, JOINT), seed + 3)
    ones = torch.ones(1, T, dtype=torch.int64)
    cast = (lambda x: x.to(dtype)) if dtype is not None else (lambda x: x)  # noqa: E731
    kw = dict(negative_prompt_embeds=cast(ne), negative_prompt_embeds_mask=ones, true_cfg_scale=4.0) if cfg else \
        dict(true_cfg_scale=1.0)
    with torch.no_grad():
        res = pipe(prompt_embeds=cast(pe), prompt_embeds_mask=ones, latents=lat.clone(), height=16 * rows,
                   width=16 * cols, num_inference_steps=4, output_type="latent", callback_on_step_end=on_step_end,
                   **kw)
    final = res.images
    assert torch.equal(final, steps_seen[-1])
    t = {"latents_init": lat, "prompt_embeds": pe, "sigmas": pipe.scheduler.sigmas.clone(),
         "latents_final": final, "grid": torch.tensor([rows, cols], dtype=torch.float32)}
    if cfg:
        t["negative_prompt_embeds"] = ne
        t["true_cfg_scale"] = gc.scalar(4.0)
    fn = f"loop_{model}_{rows}x{cols}_t{T}{'_cfg' if cfg else ''}{'_bf16' if dtype is not None else ''}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), t)
    gc.log(f"{fn}: sigmas {pipe.scheduler.sigmas.tolist()}, final std {final.std().item():.4f}")
    meanings = {"latents_init": "packed latents passed as latents=", "prompt_embeds": "prompt_embeds (mask all ones)",
                "negative_prompt_embeds": "negative_prompt_embeds (mask all ones)",
                "true_cfg_scale": "true_cfg_scale", "sigmas": "scheduler.sigmas after set_timesteps",
                "latents_final": "packed latents after the last step", "grid": "the packed token grid"}
    README.append((fn, f"QwenImagePipeline, {model}, 4 steps, {16 * rows}x{16 * cols} pixels, T={T}"
                   f"{', true CFG 4' if cfg else ''}{', the pipeline in bf16' if dtype is not None else ''}; "
                   f"scheduler {SCHED_CFG}.",
                   [(k, list(v.shape), "F32", meanings.get(k, "")) for k, v in sorted(t.items())]))


PIPE = os.path.join(OUT, "pipeline")


def build_pipeline():
    torch.manual_seed(304)
    tf = QwenImageTransformer2DModel(num_layers=1, **COMMON)
    gc.reinit_transformer(tf, 304, mod_gain=1.5)
    torch.manual_seed(305)
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=IN_CH // 4, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                 latents_mean=[0.1, -0.2, 0.3, 0.0], latents_std=[1.5, 0.8, 1.2, 2.0])
    pipe = QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHED_CFG), vae=vae, text_encoder=None,
                             tokenizer=None, transformer=tf.to(torch.bfloat16))
    pipe.save_pretrained(PIPE, safe_serialization=True)
    mask = torch.ones(1, 9, dtype=torch.int64)
    mask[:, 7:] = 0
    gc.save_tensors(os.path.join(PIPE, "prompts", "cat.safetensors"),
                    {"prompt_embeds": gc.randn((1, 9, JOINT), 306), "prompt_embeds_mask": mask},
                    keep_dtype=("prompt_embeds_mask",))
    gc.save_tensors(os.path.join(PIPE, "prompts", "blurry.safetensors"),
                    {"prompt_embeds": gc.randn((1, 7, JOINT), 307)})
    gc.log(f"saved the QwenImagePipeline folder: vae_scale_factor {pipe.vae_scale_factor}")


def pipeline_case(rows, cols, seed):
    from safetensors.torch import load_file
    pipe = QwenImagePipeline.from_pretrained(PIPE, text_encoder=None, tokenizer=None)
    pipe.transformer = pipe.transformer.to(torch.float32)  # bf16 weights as stored, f32 compute
    pipe.set_progress_bar_config(disable=True)
    pos = load_file(os.path.join(PIPE, "prompts", "cat.safetensors"))
    neg = load_file(os.path.join(PIPE, "prompts", "blurry.safetensors"))
    lat = gc.randn((1, rows * cols, IN_CH), seed)
    f = 2 * pipe.vae_scale_factor
    with torch.no_grad():
        out = pipe(prompt_embeds=pos["prompt_embeds"], prompt_embeds_mask=pos["prompt_embeds_mask"],
                   negative_prompt_embeds=neg["prompt_embeds"],
                   negative_prompt_embeds_mask=torch.ones(1, 7, dtype=torch.int64), true_cfg_scale=4.0,
                   latents=lat.clone(), height=f * rows, width=f * cols, num_inference_steps=4,
                   output_type="latent").images
    with torch.no_grad():
        img = pipe(prompt_embeds=pos["prompt_embeds"], prompt_embeds_mask=pos["prompt_embeds_mask"],
                   negative_prompt_embeds=neg["prompt_embeds"],
                   negative_prompt_embeds_mask=torch.ones(1, 7, dtype=torch.int64), true_cfg_scale=4.0,
                   latents=lat.clone(), height=f * rows, width=f * cols, num_inference_steps=4,
                   output_type="np").images[0]
    u8 = torch.from_numpy((img * 255).round().astype("uint8"))
    fn = f"pipeline_cat_{f * rows}x{f * cols}_cfg.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), {"latents_init": lat, "latents_final": out, "image_u8": u8},
                    keep_dtype=("image_u8",))
    gc.log(f"{fn}: final std {out.std().item():.4f}")
    README.append((fn, f"QwenImagePipeline.from_pretrained(tests/data/qwenimage/pipeline) (transformer bf16 as stored, "
                   f"then .to(float32)), prompts cat (masked: 7 of 9 tokens) and blurry as the negative, true_cfg_scale "
                   f"4, height {f * rows}, width {f * cols}, 4 steps, output_type latent.",
                   [("latents_init", list(lat.shape), "F32", "packed latents passed as latents="),
                    ("latents_final", list(out.shape), "F32", "packed latents after the last step"),
                    ("image_u8", list(u8.shape), "U8", "the same call with output_type np: (image * 255).round(), "
                     "HWC")]))


def vae_case(rows, cols, seed):
    vae = AutoencoderKLQwenImage.from_pretrained(os.path.join(PIPE, "vae")).eval()
    z = gc.randn((1, IN_CH // 4, 1, rows, cols), seed)
    with torch.no_grad():
        x = vae.decode(z, return_dict=False)[0]
    fn = f"vae_decode_{rows}x{cols}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), {"latents": z[:, :, 0], "image": x[:, :, 0]})
    gc.log(f"{fn}: image std {x.std().item():.4f}, clamped share {(x.abs() >= 1).float().mean().item():.3f}")
    README.append((fn, f"AutoencoderKLQwenImage.decode of the pipeline folder's VAE on one frame of random latents "
                   f"({rows} x {cols}); the output is clamped to [-1, 1] as _decode does.",
                   [("latents", [1, IN_CH // 4, rows, cols], "F32", "z (the frame axis dropped)"),
                    ("image", [1, 3, rows * 8, cols * 8], "F32", "decode(z)[:, :, 0]")]))


def main():
    gc.setup()
    for d in ("tiny-g", "tiny-bf16", "golden", "pipeline"):
        shutil.rmtree(os.path.join(OUT, d), ignore_errors=True)
    os.makedirs(GOLD)
    build_models()
    fwd_case("tiny-g", 16, 16, 8, seed=6000)
    fwd_case("tiny-g", 15, 13, 7, seed=6100)
    fwd_case("tiny-g", 15, 13, 9, seed=6200, masked=True)
    fwd_case("tiny-bf16", 15, 13, 7, seed=6300)
    loop_case(16, 16, 8, seed=7000, cfg=False)
    loop_case(15, 13, 7, seed=7100, cfg=True)
    loop_case(15, 13, 7, seed=7200, cfg=True, model="tiny-bf16", dtype=torch.bfloat16)
    loop_case(15, 13, 7, seed=7300, cfg=False, model="tiny-bf16", dtype=torch.bfloat16)
    build_pipeline()
    pipeline_case(8, 6, seed=8000)
    vae_case(7, 5, seed=8100)
    gc.write_readme(os.path.join(GOLD, "README.md"), "Qwen-Image transformer goldens", "tests/golden/make_qwen.py", README)
    gc.list_written(OUT)


if __name__ == "__main__":
    main()
