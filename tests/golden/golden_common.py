"""Shared helpers for the golden-data generators in tests/golden/.

Not a script: imported by make_flux.py, make_other.py, make_vae.py and make_default_model.py
(they set sys.dont_write_bytecode first, so no __pycache__ is left in the repository).

What lives here:
  * setup()            -- fixed thread count (2), deterministic algorithms, quiet progress bars.
  * reinit_transformer -- deterministic re-initialisation of every parameter of a DiT
                          (FLUX.1 / FLUX.2 / Qwen-Image) with a normal distribution scaled so that
                          activations stay O(1) and every parameter (incl. AdaLN modulation) matters.
  * reinit_vae         -- the same for AutoencoderKL.
  * save_tensors       -- safetensors.torch.save_file with contiguous tensors (float32 by default).
  * scalar             -- a Python number as a float32 tensor of shape [1].
  * pack/unpack helpers identical to FluxPipeline._pack_latents/_unpack_latents.
"""

import hashlib
import os
import sys

import torch
from safetensors.torch import save_file

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def setup():
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    try:
        from diffusers.utils import logging as dlog

        dlog.disable_progress_bar()
    except Exception:  # pragma: no cover
        pass


def repo_path(*parts):
    return os.path.join(REPO_ROOT, *parts)


def scalar(x, dtype=torch.float32):
    return torch.tensor([float(x)], dtype=dtype)


def save_tensors(path, tensors, keep_dtype=()):
    """Write `tensors` (name -> tensor) as safetensors; everything float32 unless its name is in keep_dtype."""
    out = {}
    for k, v in tensors.items():
        v = v.detach().cpu()
        if k not in keep_dtype:
            v = v.to(torch.float32)
        out[k] = v.contiguous().clone()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file(out, path)


def _gen(seed):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def _normal_(p, std, mean=0.0, g=None):
    with torch.no_grad():
        t = torch.randn(p.shape, generator=g, dtype=torch.float32) * std + mean
        p.copy_(t.to(p.dtype))


# Modules whose Linear output is AdaLN modulation (shift/scale/gate). Matched as substrings of the
# parameter name. They get `mod_gain` instead of `gain`, so the modulation is clearly non-zero but
# (1 + scale) stays mostly positive and gates stay O(1).
_MOD_KEYS = (
    "norm1.linear",
    "norm1_context.linear",
    "norm.linear",  # FLUX.1 single block, AdaLayerNormZeroSingle
    "norm_out.linear",
    "_modulation",  # FLUX.2 double/single_stream_modulation_*
    "img_mod.",  # Qwen-Image
    "txt_mod.",
)


def reinit_transformer(model, seed, gain=1.0, mod_gain=0.5, bias_std=0.1, norm_std=0.2):
    """Deterministically re-initialise every parameter of a transformer.

    * 2-D weights (Linear):   N(0, (gain / sqrt(fan_in))^2); modulation Linears use mod_gain.
    * 1-D '*.bias':           N(0, bias_std^2).
    * 1-D other (RMSNorm / LayerNorm weights): N(1, norm_std^2).
    * anything else (conv etc.): N(0, (gain/sqrt(fan_in))^2) with fan_in = numel / shape[0].
    Parameters are visited in sorted-name order, each with its own generator seeded from
    (seed, index), so the result does not depend on module construction order.
    """
    names = sorted(n for n, _ in model.named_parameters())
    params = dict(model.named_parameters())
    for i, name in enumerate(names):
        p = params[name]
        g = _gen(seed * 100003 + i)
        is_mod = any(k in name for k in _MOD_KEYS)
        if p.ndim == 1:
            if name.endswith(".bias"):
                _normal_(p, bias_std, g=g)
            else:
                _normal_(p, norm_std, mean=1.0, g=g)
        else:
            fan_in = p.numel() // p.shape[0]
            _normal_(p, (mod_gain if is_mod else gain) / fan_in**0.5, g=g)
    return model


def reinit_vae(model, seed, gain=1.0, bias_std=0.05, norm_std=0.1, conv_out_gain=None):
    """Deterministic re-initialisation of an AutoencoderKL.

    Convs / linears: N(0, (gain/sqrt(fan_in))^2) (fan_in = in_ch*kh*kw); GroupNorm weights N(1, norm_std^2);
    biases N(0, bias_std^2). Residual blocks are not variance-preserving with this init, so the caller
    picks `gain`; `conv_out_gain` (decoder.conv_out) sets the final image range.
    """
    names = sorted(n for n, _ in model.named_parameters())
    params = dict(model.named_parameters())
    for i, name in enumerate(names):
        p = params[name]
        g = _gen(seed * 100003 + i)
        if p.ndim == 1:
            if name.endswith(".bias"):
                _normal_(p, bias_std, g=g)
            else:
                _normal_(p, norm_std, mean=1.0, g=g)
        else:
            fan_in = p.numel() // p.shape[0]
            gg = gain
            if conv_out_gain is not None and name.startswith("decoder.conv_out."):
                gg = conv_out_gain
            _normal_(p, gg / fan_in**0.5, g=g)
    return model


def randn(shape, seed, dtype=torch.float32):
    return torch.randn(shape, generator=_gen(seed), dtype=dtype)


def pack_latents(latents):
    """FluxPipeline._pack_latents: [B, C, h, w] -> [B, (h/2)(w/2), 4C]."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(packed, h, w):
    """FluxPipeline._unpack_latents for a latent grid h x w (in latent pixels)."""
    b, n, c4 = packed.shape
    x = packed.view(b, h // 2, w // 2, c4 // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c4 // 4, h, w)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_readme(path, title, script, entries):
    """A golden folder's README.md: a title, the script that wrote it, then one section per file
    (entries: (file name, description, [(tensor, shape, dtype, meaning)]))."""
    lines = [f"# {title}", "", f"Written by `{script}` (see its docstring for the models and inputs).", ""]
    for fn, desc, rows in entries:
        lines += [f"### {fn}", "", desc, "", "| tensor | shape | dtype | meaning |", "|---|---|---|---|"]
        lines += [f"| `{k}` | {s} | {d} | {m} |" for k, s, d, m in rows]
        lines.append("")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines))


def list_written(root):
    """Print size + sha256 of every file under root (sorted), return total bytes."""
    total = 0
    for dirpath, _, files in sorted(os.walk(root)):
        for fn in sorted(files):
            p = os.path.join(dirpath, fn)
            sz = os.path.getsize(p)
            total += sz
            print(f"  {os.path.relpath(p, REPO_ROOT)}  {sz} B  {sha256_file(p)[:16]}")
    print(f"  total under {os.path.relpath(root, REPO_ROOT)}: {total} B")
    return total


def log(*a):
    print(*a, flush=True)
    sys.stdout.flush()
