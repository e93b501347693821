"""Golden data for the FLUX-style AutoencoderKL decoder (real Diffusers).

Run from the repository root (CPU only, ~10 s), AFTER make_default_model.py:

    /opt/goldenv/bin/python tests/golden/make_default_model.py   # writes tests/data/random/flux-tiny/ (incl. vae/)
    /opt/goldenv/bin/python tests/golden/make_vae.py

Run order: this script READS tests/data/random/flux-tiny/vae/ (written by make_default_model.py) and decodes with
that VAE, so make_default_model.py must run first (and re-running it requires re-running this script).
It writes nothing under models/. See tests/golden/README.md.

Environment: torch 2.15 (CPU), diffusers 0.42.1, numpy 2.x. Not run in CI; outputs are committed.
Re-running regenerates every file bit-identically.

What it writes (deletes and rebuilds tests/data/vae/):

  tests/data/vae/golden/decode_8x8.safetensors    latent grid 8x8   -> 64x64 image
  tests/data/vae/golden/decode_10x6.safetensors   latent grid 10x6  -> 80x48 image (h=10 rows, w=6 cols)
  tests/data/vae/golden/decode_tiled_16x16.safetensors   tiled decode, 16x16 latent -> 128x128 image
  tests/data/vae/golden/README.md

The model is NOT stored under tests/data: it is the embedded default model's VAE,
AutoencoderKL.from_pretrained("tests/data/random/flux-tiny", subfolder="vae"), float32 (FLUX.1 VAE layout, shrunk:
latent_channels 16, 4 x DownEncoderBlock2D / UpDecoderBlock2D, block_out_channels (32, 64, 64, 64),
layers_per_block 1 (decoder: 2 resnets per up block), norm_num_groups 32, mid-block attention on,
use_quant_conv False, use_post_quant_conv False, scaling_factor 0.3611, shift_factor 0.1159,
sample_size 32; random weights from make_default_model.py: golden_common.reinit_vae(gain=1.0,
conv_out_gain=0.8)). Decoded images have std ~0.41 with ~2 % of the values outside [-1, 1] (printed in
the log), so the clamp in postprocessing is exercised but most pixels are not saturated.

decode_<h>x<w>: `packed` [1, h/2*w/2, 64] is random normal (what the denoising loop produces);
`latents` = FluxPipeline._unpack_latents(packed, 8h, 8w, 8) / scaling_factor + shift_factor, computed
with exactly the pipeline's expression; `image` = vae.decode(latents).sample (before any clamp);
`image_u8` = VaeImageProcessor.postprocess(image, "np") (i.e. (x*0.5+0.5).clamp(0,1), NHWC) then
numpy `(x*255).round()` as VaeImageProcessor.numpy_to_pil does, stored as float32 [8h, 8w, 3].

Tiled case: vae.enable_tiling(); then tile_latent_min_size = 8, tile_sample_min_size = 64,
tile_overlap_factor = 0.25 (set on the instance after enable_tiling). For a 16x16 latent this gives
overlap_size int(8*0.75) = 6, latent tile starts 0, 6, 12 in each direction (3x3 = 9 overlapping tiles,
latent rows/cols [0:8], [6:14], [12:16]; the last row/column of tiles is only 4 latents = 32 px),
blend_extent int(64*0.25) = 16 px, row_limit 64 - 16 = 48 px; output 48 + 48 + 32 = 128 px each way.
"""

import sys

sys.dont_write_bytecode = True

import os
import shutil

import numpy as np
import torch

import golden_common as gc
from diffusers import AutoencoderKL, FluxPipeline
from diffusers.image_processor import VaeImageProcessor

OUT = gc.repo_path("tests", "data", "vae")
GOLD = os.path.join(OUT, "golden")
DEFAULT_MODEL = gc.repo_path("tests", "data", "random", "flux-tiny")  # written by make_default_model.py

TILED_HW = 16  # latent grid of the tiled case (square)
TILE = dict(tile_latent_min_size=8, tile_sample_min_size=64, tile_overlap_factor=0.25)

README = []


def scale_like_pipeline(packed, h, w, vae):
    """The pipeline's decode prologue, verbatim (pipeline_flux.py, output_type != 'latent')."""
    latents = FluxPipeline._unpack_latents(packed, 8 * h, 8 * w, 8)
    latents = (latents / vae.config.scaling_factor) + vae.config.shift_factor
    return latents


def to_u8(image):
    proc = VaeImageProcessor(vae_scale_factor=16)  # what FluxPipeline builds (vae_scale_factor * 2)
    np_img = proc.postprocess(image, output_type="np")  # [1, H, W, 3] float32 in [0, 1]
    u8 = (np_img * 255).round().astype("uint8")  # VaeImageProcessor.numpy_to_pil
    return torch.from_numpy(u8[0].astype(np.float32))


def decode_case(vae, h, w, seed):
    packed = gc.randn((1, (h // 2) * (w // 2), 64), seed)
    latents = scale_like_pipeline(packed, h, w, vae)
    with torch.no_grad():
        image = vae.decode(latents).sample
    u8 = to_u8(image)
    fn = f"decode_{h}x{w}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), {"latents": latents, "packed": packed, "image": image, "image_u8": u8})
    sat = ((image > 1) | (image < -1)).float().mean().item()
    gc.log(f"{fn}: image std {image.std().item():.4f} mean {image.mean().item():+.4f} "
           f"min {image.min().item():.3f} max {image.max().item():.3f}, {100 * sat:.1f}% outside [-1,1]")
    README.append((fn, f"Plain decode of a {h}x{w} latent grid (h rows, w cols).", [
        ("packed", [1, (h // 2) * (w // 2), 64], "packed latents as the denoising loop leaves them (random normal)"),
        ("latents", [1, 16, h, w], "_unpack_latents(packed) / 0.3611 + 0.1159: the vae.decode input"),
        ("image", [1, 3, 8 * h, 8 * w], "vae.decode(latents).sample, NCHW, not clamped"),
        ("image_u8", [8 * h, 8 * w, 3], "uint8 RGB pixel values (as float32): round(clamp(image*0.5+0.5, 0, 1)*255), HWC"),
    ]))


def tiled_case(vae, seed):
    h = w = TILED_HW
    packed = gc.randn((1, (h // 2) * (w // 2), 64), seed)
    latents = scale_like_pipeline(packed, h, w, vae)
    vae.enable_tiling()
    for k, v in TILE.items():
        setattr(vae, k, v)
    lat, smp, ov = TILE["tile_latent_min_size"], TILE["tile_sample_min_size"], TILE["tile_overlap_factor"]
    starts = list(range(0, h, int(lat * (1 - ov))))
    assert len(starts) == 3 and all(s + lat > n for s, n in zip(starts, starts[1:])), starts  # 3x3, overlapping
    with torch.no_grad():
        image = vae.decode(latents).sample
        vae.disable_tiling()
        plain = vae.decode(latents).sample
    assert image.shape == (1, 3, 8 * h, 8 * w)
    fn = f"decode_tiled_{h}x{w}.safetensors"
    gc.save_tensors(os.path.join(GOLD, fn), {"latents": latents, "image": image})
    gc.log(f"{fn}: image std {image.std().item():.4f}; max |tiled - untiled| {(image - plain).abs().max().item():.4f} "
           f"(not stored)")
    README.append((fn, f"Tiled decode (vae.enable_tiling(), tile_latent_min_size {lat}, tile_sample_min_size {smp}, "
                   f"tile_overlap_factor {ov}) of a {h}x{w} latent grid: 3x3 overlapping tiles.", [
        ("latents", [1, 16, h, w], "vae.decode input (already scaled/shifted, as above)"),
        ("image", [1, 3, 8 * h, 8 * w], "vae.decode(latents).sample with tiling, NCHW, not clamped"),
    ]))


def write_readme():
    L = [
        "# AutoencoderKL decoder golden data",
        "",
        "Generated by `tests/golden/make_vae.py` (diffusers 0.42.1, torch CPU, float32); re-runs are",
        "bit-identical. The model is the embedded default model's VAE, `tests/data/random/flux-tiny/vae/` (written by",
        "`tests/golden/make_default_model.py`, which must run before make_vae.py; it is not copied here):",
        "FLUX-like AutoencoderKL, latent_channels 16, block_out_channels (32, 64, 64, 64), layers_per_block 1,",
        "norm_num_groups 32, mid-block attention, no quant/post-quant conv, scaling_factor 0.3611,",
        "shift_factor 0.1159, sample_size 32, random weights, float32.",
        "",
        "Tiled decoding (AutoencoderKL.tiled_decode) for the tiled case:",
        "",
        "- settings (set on the instance after `vae.enable_tiling()`): tile_latent_min_size 8,",
        "  tile_sample_min_size 64, tile_overlap_factor 0.25; latent grid 16x16 (image 128x128);",
        "- overlap_size = int(tile_latent_min_size * (1 - overlap)) = 6 latents; tiles start at",
        "  0, 6, 12 in both directions (3x3 tiles: latent [0:8], [6:14], [12:16]; the last ones are 4 wide);",
        "- every tile is decoded independently (decoder only, no post_quant_conv);",
        "- blend_extent = int(tile_sample_min_size * overlap) = 16 px, row_limit = 64 - 16 = 48 px;",
        "- in row-major tile order: tile = blend_v(upper, tile) then blend_h(left, tile), both IN PLACE on",
        "  the stored tile, with b[y] = a[-E+y]*(1-y/E) + b[y]*(y/E), E = min(a extent, b extent, 16).",
        "  Because they are in place, both `upper` and `left` are the neighbours AFTER their own blending",
        "  (v then h), before cropping;",
        "- each tile is then cropped to [:48, :48] and the crops are concatenated (last ones are 32 px):",
        "  48 + 48 + 32 = 128 px in each direction.",
        "",
        "## Files",
        "",
    ]
    for fn, desc, rows in README:
        L += [f"### {fn}", "", desc, "", "| tensor | shape | dtype | meaning |", "|---|---|---|---|"]
        for k, s, m in rows:
            L.append(f"| `{k}` | {s} | F32 | {m} |")
        L.append("")
    with open(os.path.join(GOLD, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(L))


def main():
    gc.setup()
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(GOLD)
    vae_dir = os.path.join(DEFAULT_MODEL, "vae")
    if not os.path.isfile(os.path.join(vae_dir, "config.json")):
        sys.exit(f"{vae_dir} is missing: run tests/golden/make_default_model.py first")
    vae = AutoencoderKL.from_pretrained(DEFAULT_MODEL, subfolder="vae")
    vae.eval()
    assert vae.dtype == torch.float32
    assert vae.config.scaling_factor == 0.3611 and vae.config.shift_factor == 0.1159
    assert not vae.config.use_quant_conv and not vae.config.use_post_quant_conv
    gc.log(f"loaded tests/data/random/flux-tiny/vae: {sum(p.numel() for p in vae.parameters())} params, "
           f"block_out_channels {list(vae.config.block_out_channels)}, "
           f"weights sha256 {gc.sha256_file(os.path.join(vae_dir, 'diffusion_pytorch_model.safetensors'))[:16]}")

    decode_case(vae, 8, 8, seed=410)
    decode_case(vae, 10, 6, seed=411)
    tiled_case(vae, seed=412)
    write_readme()
    gc.list_written(OUT)


if __name__ == "__main__":
    main()
