"""Train weft's embedded default model: a tiny FLUX.1 pipeline that paints simple drawn scenes from text.

Run from the repository root (CPU only; resumable; on 2 cores about an hour and a half with
--vae-from, the VAE's training adds about an hour, a continuation most of another):

    /opt/goldenv/bin/python tests/golden/train_default_model.py --vae-from models/flux-tiny/vae --out build-train/first
    /opt/goldenv/bin/python tests/golden/train_default_model.py --continue-from build-train/first/transformer
    /opt/goldenv/bin/python tests/golden/train_default_model.py            # all phases, resumes
    /opt/goldenv/bin/python tests/golden/train_default_model.py --sheet    # only the contact sheet
    /opt/goldenv/bin/python tests/golden/train_default_model.py --prompts  # only the prompt sets

The first two lines are how models/flux-tiny was built: a first run (its VAE the one the model
had before, copied unchanged; everything else made by this script), then 4000 more steps of its
transformer on the same data (phase 5 again, from the first run's export).

Environment: torch 2.15 (CPU), diffusers 0.42.1, transformers 5.24, sentencepiece 0.2.3, Pillow,
numpy (PyPI). Not run in CI: its output, models/flux-tiny, is committed. Seeded: with the same
versions and 2 threads a rerun writes the same weights.

The data set is drawn here (nothing is downloaded): one or two shapes (circle, square, triangle,
star, ring, cross) in one of eight named colours, small or large, at one of nine named places
(center, left, right, top, bottom, the four corners), on a background of another named colour, at
128x128, with a caption in one of several English phrasings (`caption()`). A fixed set of held-out
combinations of (shape colour, shape, place, background) is never drawn for training (`held_out()`);
tests/data/picture/prompts.json lists the prompts the picture test renders from it.

Phases (each saves its state under --state and is skipped when already done):
  1. tokenizers   tokenizer/: CLIP-L's real BPE vocabulary (copied from tests/data/text/tokenizer);
                  tokenizer_2/: a SentencePiece unigram model (vocabulary 500) trained on the captions and
                  make_tokenizers.py's general sentences (model_max_length
                  48, the T5 length the transformer is trained with and weft's default for this model)
  2. encoders     text_encoder/ (CLIPTextModel, CLIP-L-shaped, narrow: hidden 64, 2 layers; stored
                  bf16) and text_encoder_2/ (T5EncoderModel v1.1, narrow: d_model 128, 8 heads, 2
                  layers, its relative position bias set: T5_HEADS; stored f32), random-initialised
                  and frozen
  3. vae          AutoencoderKL (FLUX layout: 16 latent channels, 8 pixels per latent) trained on drawn
                  scenes (L1 + MSE + a small KL term; a second stage weights the shapes' pixels 8 to 1);
                  shift and scaling factors measured on its latents
  4. data         DATA scenes drawn, encoded by the VAE (posterior mean) and by both text encoders
  5. transformer  FluxTransformer2DModel trained by flow matching (x_t = (1 - s) x0 + s e, target e - x0,
                  s logit-normal; the shapes' latent tokens weighted), AdamW, EMA of the weights;
                  no guidance embedding
  6. export       FluxPipeline(...).save_pretrained(--out); tests/data/picture/prompts.json (the
                  picture test's held-out prompts), validation.json (160 more, for choosing
                  between models) and golden.safetensors (FluxPipeline's final
                  latents and image for one prompt from seeded latents: the parity test's); then
                  a contact sheet of samples
"""

import sys

sys.dont_write_bytecode = True

import argparse
import copy
import hashlib
import io
import json
import math
import os
import random
import shutil
import time

import numpy as np
import torch
from PIL import Image, ImageDraw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_common as gc  # noqa: E402

SIZE = 128
T5_LEN = 48
DATA = 48000
VAE_STEPS = 1800
VAE2_STEPS = 2400
DATA_TWO = 0.5  # the data set's scenes: the chance of trying two shapes (the VAE's: 0.25)
TR_STEPS = 6000
TR_PEAK = 5e-4
TR_WEIGHT = 4.0  # the loss on the shapes' latent tokens (shape_tokens) against the rest
TR_BATCH = 64
TR_MORE_STEPS = 4000  # --continue-from: a second cosine, from TR_MORE_PEAK
TR_MORE_PEAK = 2.5e-4
# T5's first layer's relative position bias, one entry per head (the later layer reuses it, as
# T5 does): an offset the head reads (bias T5_BIAS there, 0 elsewhere), or a window of offsets
# it averages over (T5_WINDOW_BIAS on each)
T5_HEADS = (0, -1, 1, 2, (-7, -1), (1, 7), (-3, -1), (1, 3))
T5_BIAS = 8.0
T5_WINDOW_BIAS = 6.0
T5_D_MODEL = 128

COLOURS = {
    "red": (220, 30, 30), "green": (30, 160, 50), "blue": (30, 70, 225), "yellow": (240, 220, 40),
    "orange": (245, 135, 20), "purple": (130, 50, 170), "white": (245, 245, 245), "black": (20, 20, 20),
}
SHAPES = ["circle", "square", "triangle", "star", "ring", "cross"]
PLACES = {  # centre in units of the image side
    "center": (0.5, 0.5), "left": (0.25, 0.5), "right": (0.75, 0.5), "top": (0.5, 0.25),
    "bottom": (0.5, 0.75), "top left": (0.25, 0.25), "top right": (0.75, 0.25),
    "bottom left": (0.25, 0.75), "bottom right": (0.75, 0.75),
}
PLACE_WORDS = {
    "center": ["in the center", "in the middle"], "left": ["on the left"], "right": ["on the right"],
    "top": ["at the top"], "bottom": ["at the bottom"],
    "top left": ["in the top left corner"], "top right": ["in the top right corner"],
    "bottom left": ["in the bottom left corner"], "bottom right": ["in the bottom right corner"],
}
RADIUS = {"small": 0.11, "large": 0.2}


def held_out(colour, shape, place, bg):
    """One combination in 20 is never drawn for training (a hash, so the test can list them)."""
    h = hashlib.sha256(f"{colour}|{shape}|{place}|{bg}".encode()).digest()
    return h[0] % 20 == 0


def shape_phrase(rng, s):
    words = f"{s['size']} {s['colour']}" if s["say_size"] else s["colour"]
    return f"{'an' if words[0] in 'aeiou' else 'a'} {words} {s['shape']}"


def caption(rng, scene):
    bg = scene["bg"]
    if len(scene["shapes"]) == 2:
        a, b = scene["shapes"]
        pa, pb = rng.choice(PLACE_WORDS[a["place"]]), rng.choice(PLACE_WORDS[b["place"]])
        form = rng.randrange(2)
        if form == 0:
            return f"two shapes: {shape_phrase(rng, a)} {pa} and {shape_phrase(rng, b)} {pb}, {bg} background"
        return f"{shape_phrase(rng, a)} {pa} and {shape_phrase(rng, b)} {pb} on a {bg} background"
    s = scene["shapes"][0]
    p = rng.choice(PLACE_WORDS[s["place"]])
    form = rng.randrange(5)
    if s["place"] == "center" and form == 4:
        return f"{shape_phrase(rng, s)} on a {bg} background"
    if form == 0:
        return f"{shape_phrase(rng, s)} {p} on a {bg} background"
    if form == 1:
        return f"{shape_phrase(rng, s)} {p}, {bg} background"
    if form == 2:
        return f"{bg} background with {shape_phrase(rng, s)} {p}"
    return f"{shape_phrase(rng, s)} on a {bg} background, {p}"


def far_apart(p, q):
    (x0, y0), (x1, y1) = PLACES[p], PLACES[q]
    return max(abs(x0 - x1), abs(y0 - y1)) >= 0.5


def random_scene(rng, two=0.25):
    """One scene: two shapes with chance `two` (when they fall far enough apart), else one."""
    while True:
        n = 2 if rng.random() < two else 1
        bg = rng.choice(list(COLOURS))
        shapes, ok = [], True
        for _ in range(n):
            colour = rng.choice([c for c in COLOURS if c != bg])
            shape = rng.choice(SHAPES)
            place = rng.choice(list(PLACES))
            if held_out(colour, shape, place, bg) or any(
                    s["place"] == place or not far_apart(s["place"], place) for s in shapes):
                ok = False
                break
            size = rng.choice(["small", "large"])
            shapes.append({"colour": colour, "shape": shape, "place": place, "size": size,
                           "say_size": rng.random() < 0.6})
        if ok:
            return {"bg": bg, "shapes": shapes}


def draw(scene, rng):
    """The scene at 2x, box-filtered to SIZE (soft edges), as uint8 [SIZE, SIZE, 3]."""
    s2 = SIZE * 2
    img = Image.new("RGB", (s2, s2), COLOURS[scene["bg"]])
    d = ImageDraw.Draw(img)
    for s in scene["shapes"]:
        cx, cy = PLACES[s["place"]]
        r = RADIUS[s["size"]] * s2 * rng.uniform(0.9, 1.1)
        cx = cx * s2 + rng.uniform(-6, 6)
        cy = cy * s2 + rng.uniform(-6, 6)
        col = COLOURS[s["colour"]]
        k = s["shape"]
        if k == "circle":
            d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=col)
        elif k == "ring":
            d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=col)
            ri = 0.55 * r
            d.ellipse([cx - ri, cy - ri, cx + ri, cy + ri], fill=COLOURS[scene["bg"]])
        elif k == "square":
            h = 0.85 * r
            d.rectangle([cx - h, cy - h, cx + h, cy + h], fill=col)
        elif k == "triangle":
            pts = [(cx + r * math.cos(a), cy + r * math.sin(a)) for a in
                   (-math.pi / 2, -math.pi / 2 + 2 * math.pi / 3, -math.pi / 2 + 4 * math.pi / 3)]
            d.polygon(pts, fill=col)
        elif k == "star":
            pts = []
            for i in range(10):
                a = -math.pi / 2 + i * math.pi / 5
                rr = r if i % 2 == 0 else 0.45 * r
                pts.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
            d.polygon(pts, fill=col)
        elif k == "cross":
            w = 0.32 * r
            d.rectangle([cx - r, cy - w, cx + r, cy + w], fill=col)
            d.rectangle([cx - w, cy - r, cx + w, cy + r], fill=col)
    return np.asarray(img.resize((SIZE, SIZE), Image.BOX), dtype=np.uint8)


def to_tensor(imgs):
    x = torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).float()
    return x / 127.5 - 1.0


def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


# ---------------------------------------------------------------------------------------------------
# 1-2: tokenizers and frozen text encoders


def phase_tokenizers(state):
    out = os.path.join(state, "tokenizers")
    if os.path.exists(os.path.join(out, "done")):
        return
    import sentencepiece as spm
    from transformers import T5TokenizerFast

    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    shutil.copytree(gc.repo_path("tests", "data", "text", "tokenizer"), os.path.join(out, "tokenizer"))
    rng = random.Random(11)
    lines = [caption(rng, random_scene(rng)) for _ in range(20000)]
    # the captions alone have too few distinct words for a unigram vocabulary: the general sentences
    # of the tokenizer tests' model are added
    from make_tokenizers import training_text

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines + training_text()), model_writer=model, vocab_size=500,
        model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0,
        num_threads=1, minloglevel=2)
    raw = os.path.join(out, "t5raw")
    os.makedirs(raw)
    with open(os.path.join(raw, "spiece.model"), "wb") as f:
        f.write(model.getvalue())
    extra = [f"<extra_id_{i}>" for i in range(100)]
    write_json(os.path.join(raw, "tokenizer_config.json"), {
        "additional_special_tokens": extra, "clean_up_tokenization_spaces": True, "eos_token": "</s>",
        "extra_ids": 100, "model_max_length": T5_LEN, "pad_token": "<pad>",
        "tokenizer_class": "T5Tokenizer", "unk_token": "<unk>"})
    write_json(os.path.join(raw, "special_tokens_map.json"), {
        "additional_special_tokens": extra, "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"})
    tok = T5TokenizerFast.from_pretrained(raw)
    tok.save_pretrained(os.path.join(out, "tokenizer_2"))
    shutil.copyfile(os.path.join(raw, "spiece.model"), os.path.join(out, "tokenizer_2", "spiece.model"))
    longest = max(len(tok(s).input_ids) for s in lines)
    print(f"tokenizers: T5 vocabulary {len(tok)}, longest caption {longest} tokens (length {T5_LEN})")
    assert longest <= T5_LEN
    open(os.path.join(out, "done"), "w").close()


def load_tokenizers(state):
    from transformers import CLIPTokenizer, T5TokenizerFast

    d = os.path.join(state, "tokenizers")
    return (CLIPTokenizer.from_pretrained(os.path.join(d, "tokenizer")),
            T5TokenizerFast.from_pretrained(os.path.join(d, "tokenizer_2")))


def phase_encoders(state):
    out = os.path.join(state, "encoders")
    if os.path.exists(os.path.join(out, "done")):
        return
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    _, t5tok = load_tokenizers(state)
    torch.manual_seed(1501)
    clip = CLIPTextModel(CLIPTextConfig(
        vocab_size=49408, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=77, hidden_act="quick_gelu", bos_token_id=49406, eos_token_id=2,
        pad_token_id=1, projection_dim=64))
    torch.manual_seed(1502)
    t5 = T5EncoderModel(T5Config(
        vocab_size=len(t5tok), d_model=T5_D_MODEL, d_kv=16, num_heads=len(T5_HEADS),
        d_ff=2 * T5_D_MODEL, num_layers=2, feed_forward_proj="gated-gelu", dense_act_fn="gelu_new",
        is_gated_act=True, dropout_rate=0.0, relative_attention_num_buckets=32,
        relative_attention_max_distance=128, pad_token_id=0, eos_token_id=1, tie_word_embeddings=True))
    # With transformers' initialisation a random T5's outputs are its tokens' embeddings almost
    # alone (attention near uniform, the residual dominating), and the transformer, whose text
    # tokens have no positions (FluxPipeline's text ids are zeros), reads the prompt as a bag of
    # words: it cannot tell which colour goes with which shape, place or the background. So the
    # relative position bias alone is not random (T5_HEADS): heads that read the token itself
    # and its near neighbours bind a colour to the shape word after it, and heads that average
    # over the seven tokens before or after carry a clause's colour to its place words ("a white
    # star in the top right corner": five tokens from "white" to "right") and back. Measured by
    # a position-free probe reading the frozen outputs (two self-attention layers, then a query
    # per place): held-out two-shape captions bound right 34-40 % with the neighbour heads alone
    # (the previous model's encoder), 97-99 % with these heads (three probe seeds), and 84-96 %
    # with the same weights rounded to bfloat16: the windows' averages differ little between
    # prompts that swap two colours, so T5 is stored float32 (1.4 MB; CLIP stays bfloat16).
    from transformers.models.t5.modeling_t5 import T5Attention

    with torch.no_grad():
        bias = t5.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight
        bias.zero_()
        for head, spec in enumerate(T5_HEADS):
            lo, hi = spec if isinstance(spec, tuple) else (spec, spec)
            for offset in range(lo, hi + 1):
                bucket = T5Attention._relative_position_bucket(
                    torch.tensor([offset]), bidirectional=True, num_buckets=32, max_distance=128)
                bias[bucket, head] = T5_BIAS if lo == hi else T5_WINDOW_BIAS
    shutil.rmtree(out, ignore_errors=True)
    clip.to(torch.bfloat16).save_pretrained(os.path.join(out, "text_encoder"))
    t5.save_pretrained(os.path.join(out, "text_encoder_2"))
    open(os.path.join(out, "done"), "w").close()


def load_encoders(state):
    from transformers import CLIPTextModel, T5EncoderModel

    d = os.path.join(state, "encoders")
    clip = CLIPTextModel.from_pretrained(os.path.join(d, "text_encoder")).to(torch.float32).eval()
    t5 = T5EncoderModel.from_pretrained(os.path.join(d, "text_encoder_2")).to(torch.float32).eval()
    return clip, t5


@torch.no_grad()
def encode_text(tokenizers, encoders, captions):
    """As FluxPipeline.encode_prompt: CLIP's pooled output at 77 tokens, T5's last hidden state."""
    clip_tok, t5_tok = tokenizers
    clip, t5 = encoders
    ci = clip_tok(captions, padding="max_length", max_length=77, truncation=True, return_tensors="pt")
    pooled = clip(ci.input_ids, output_hidden_states=False).pooler_output
    ti = t5_tok(captions, padding="max_length", max_length=T5_LEN, truncation=True, return_tensors="pt")
    emb = t5(ti.input_ids, output_hidden_states=False)[0]
    return emb, pooled


# ---------------------------------------------------------------------------------------------------
# 3: the VAE


def make_vae():
    from diffusers import AutoencoderKL

    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 4,
                         up_block_types=["UpDecoderBlock2D"] * 4, block_out_channels=(16, 32, 64, 64),
                         layers_per_block=1, latent_channels=16, norm_num_groups=8, use_quant_conv=False,
                         use_post_quant_conv=False, sample_size=SIZE)


def shape_weight(imgs, scenes):
    """1 on the background, 8 on pixels that differ from it (the shapes and their edges): the
    shapes are a small part of each picture, and their colours are what the pictures are for."""
    x = np.stack(imgs).astype(np.int16)
    bg = np.array([COLOURS[s["bg"]] for s in scenes], dtype=np.int16)[:, None, None, :]
    mask = np.abs(x - bg).max(axis=-1) > 24
    return torch.from_numpy(1.0 + 7.0 * mask.astype(np.float32))[:, None]


def phase_vae(state):
    """Two stages: VAE_STEPS of batch 16 with a plain L1 + MSE loss, then VAE2_STEPS of batch 12
    with the loss weighted towards the shapes (shape_weight), each on a cosine schedule."""
    out = os.path.join(state, "vae")
    if os.path.exists(os.path.join(out, "done")):
        return
    os.makedirs(out, exist_ok=True)
    ck = os.path.join(out, "ckpt.pt")
    torch.manual_seed(1503)
    vae = make_vae()
    opt = torch.optim.AdamW(vae.parameters(), lr=6e-4, weight_decay=0.0)
    step = 0
    rng = random.Random(1503)
    if os.path.exists(ck):  # the drawing and noise streams resume where they were
        s = torch.load(ck, weights_only=False)
        vae.load_state_dict(s["model"])
        opt.load_state_dict(s["opt"])
        step = s["step"]
        if "rng" in s:
            rng.setstate(s["rng"])
            torch.set_rng_state(s["torch_rng"])
        print(f"vae: resumed at step {step}")
    t0 = time.time()
    total = VAE_STEPS + VAE2_STEPS
    while step < total:
        if step == VAE_STEPS:  # the second stage draws its own streams
            rng = random.Random(1513)
            torch.manual_seed(1513)
        two = step >= VAE_STEPS
        k, n = (step - VAE_STEPS, VAE2_STEPS) if two else (step, VAE_STEPS)
        peak = 4e-4 if two else 6e-4
        lr = peak * (0.5 * (1 + math.cos(math.pi * k / n))) + 2e-5
        for g in opt.param_groups:
            g["lr"] = lr
        scenes = [random_scene(rng) for _ in range(12 if two else 16)]
        imgs = [draw(sc, rng) for sc in scenes]
        x = to_tensor(imgs)
        w = shape_weight(imgs, scenes) if two else torch.ones(x.shape[0], 1, SIZE, SIZE)
        post = vae.encode(x).latent_dist
        y = vae.decode(post.sample()).sample
        d = y - x
        rec = ((d.abs() + d.pow(2)) * w).mean() / w.mean()
        kl = post.kl().mean() / (3 * SIZE * SIZE)
        loss = rec + 1e-4 * kl
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f"vae step {step}/{total}: rec {rec.item():.4f} kl {kl.item():.3f} "
                  f"lr {lr:.2e} ({time.time() - t0:.0f} s)", flush=True)
        if step % 200 == 0 or step == total:
            torch.save({"model": vae.state_dict(), "opt": opt.state_dict(), "step": step,
                        "rng": rng.getstate(), "torch_rng": torch.get_rng_state()}, ck + ".tmp")
            os.replace(ck + ".tmp", ck)
    # FLUX's latent normalisation, measured: latents = (mean - shift) * scale have mean 0, std 1
    vae.eval()
    rng = random.Random(77)
    with torch.no_grad():
        zs = torch.cat([vae.encode(to_tensor([draw(random_scene(rng), rng) for _ in range(32)])).latent_dist.mean
                        for _ in range(16)])
    shift = float(zs.mean())
    scale = float(1.0 / (zs - shift).std())
    vae.register_to_config(shift_factor=round(shift, 4), scaling_factor=round(scale, 4))
    vae.save_pretrained(os.path.join(out, "model"))
    print(f"vae: shift_factor {shift:.4f} scaling_factor {scale:.4f}")
    open(os.path.join(out, "done"), "w").close()


def load_vae(state):
    from diffusers import AutoencoderKL

    return AutoencoderKL.from_pretrained(os.path.join(state, "vae", "model")).eval()


# ---------------------------------------------------------------------------------------------------
# 4: the data set


def pack(z):
    """FluxPipeline._pack_latents: [B, 16, H, W] -> [B, H/2 * W/2, 64]."""
    b, c, h, w = z.shape
    z = z.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return z.reshape(b, (h // 2) * (w // 2), c * 4)


def phase_data(state):
    out = os.path.join(state, "data.pt")
    if os.path.exists(out):
        return
    vae = load_vae(state)
    tok, enc = load_tokenizers(state), load_encoders(state)
    sf, sh = vae.config.scaling_factor, vae.config.shift_factor
    rng = random.Random(1504)
    lat, emb, pooled, caps = [], [], [], []
    t0 = time.time()
    with torch.no_grad():
        for i in range(0, DATA, 100):
            scenes = [random_scene(rng, DATA_TWO) for _ in range(100)]
            x = to_tensor([draw(s, rng) for s in scenes])
            z = (vae.encode(x).latent_dist.mean - sh) * sf
            c = [caption(rng, s) for s in scenes]
            e, p = encode_text(tok, enc, c)
            lat.append(pack(z))
            emb.append(e)
            pooled.append(p)
            caps += c
            if (i // 100) % 50 == 0:
                print(f"data {i}/{DATA} ({time.time() - t0:.0f} s)", flush=True)
    torch.save({"lat": torch.cat(lat), "emb": torch.cat(emb), "pooled": torch.cat(pooled), "captions": caps},
               out + ".tmp")
    os.replace(out + ".tmp", out)


# ---------------------------------------------------------------------------------------------------
# 5: the transformer


def make_transformer():
    from diffusers import FluxTransformer2DModel

    return FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=4, num_single_layers=4,
                                  attention_head_dim=32, num_attention_heads=4, joint_attention_dim=T5_D_MODEL,
                                  pooled_projection_dim=64, guidance_embeds=False, axes_dims_rope=(8, 12, 12))


def ids(h2, w2):
    img = torch.zeros(h2, w2, 3)
    img[..., 1] = torch.arange(h2)[:, None]
    img[..., 2] = torch.arange(w2)[None, :]
    return img.reshape(h2 * w2, 3), torch.zeros(T5_LEN, 3)


def shape_tokens(lat):
    """1 where a latent token differs from its picture's background (the per-channel median over
    the picture's tokens) by more than 4 in L2: the shapes and their edges, 17 % of all tokens."""
    med = lat.median(dim=1, keepdim=True).values
    return ((lat - med).norm(dim=-1) > 4.0).float()


def phase_transformer(state, name="transformer", steps=TR_STEPS, peak=TR_PEAK, seed=1505, init=None,
                      two_share=None):
    """steps of batch TR_BATCH, flow matching (x_t = (1 - s) x0 + s e, target e - x0, s
    logit-normal) with the shapes' latent tokens weighted TR_WEIGHT to 1 (the shapes are a sixth
    of the tokens the loss averages over, and their colours are what the pictures are for),
    AdamW on a cosine from peak after 200 warm-up steps, an EMA of the weights exported to
    state/name/model. With init (a FluxTransformer2DModel folder) a continuation: the model and
    its EMA start from those weights, the EMA at its full decay from the first step. With
    two_share, that share of each batch is drawn from the two-shape scenes (else the batch is
    drawn from all scenes alike, 27 % of them two-shape)."""
    out = os.path.join(state, name)
    done = os.path.join(out, "done")
    if os.path.exists(done) and open(done).read().strip() == str(steps):
        return
    os.makedirs(out, exist_ok=True)
    data = torch.load(os.path.join(state, "data.pt"), weights_only=False)
    lat, emb, pooled = data["lat"], data["emb"], data["pooled"]
    shapes = shape_tokens(lat)
    n = lat.shape[0]
    two = torch.tensor([" and " in c for c in data["captions"]])
    two_idx, one_idx = two.nonzero().squeeze(1), (~two).nonzero().squeeze(1)
    n_two = 0 if two_share is None else round(TR_BATCH * two_share)
    torch.manual_seed(seed)
    model = make_transformer()
    if init:
        from diffusers import FluxTransformer2DModel

        model.load_state_dict(FluxTransformer2DModel.from_pretrained(init).to(torch.float32).state_dict())
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=peak, weight_decay=0.01)
    step = 0
    ck = os.path.join(out, "ckpt.pt")
    g = torch.Generator().manual_seed(seed)
    if os.path.exists(ck):  # the batch and noise stream resumes where it was
        s = torch.load(ck, weights_only=False)
        model.load_state_dict(s["model"])
        ema.load_state_dict(s["ema"])
        opt.load_state_dict(s["opt"])
        step = s["step"]
        g.set_state(s["gen"])
        print(f"transformer: resumed at step {step}")
    img_ids, txt_ids = ids(SIZE // 16, SIZE // 16)
    t0, avg = time.time(), None
    while step < steps:
        warm = min(1.0, (step + 1) / 200)
        lr = peak * warm * (0.5 * (1 + math.cos(math.pi * step / steps))) + 1e-5
        for pg in opt.param_groups:
            pg["lr"] = lr
        if two_share is None:
            idx = torch.randint(0, n, (TR_BATCH,), generator=g)
        else:
            idx = torch.cat([two_idx[torch.randint(0, len(two_idx), (n_two,), generator=g)],
                             one_idx[torch.randint(0, len(one_idx), (TR_BATCH - n_two,), generator=g)]])
        x0 = lat[idx]
        noise = torch.randn(x0.shape, generator=g)
        s = torch.sigmoid(torch.randn(TR_BATCH, generator=g))
        xt = (1 - s[:, None, None]) * x0 + s[:, None, None] * noise
        pred = model(hidden_states=xt, encoder_hidden_states=emb[idx], pooled_projections=pooled[idx],
                     timestep=s, img_ids=img_ids, txt_ids=txt_ids, return_dict=False)[0]
        err = (pred - (noise - x0)).pow(2).mean(dim=-1)
        w = 1.0 + (TR_WEIGHT - 1.0) * shapes[idx]
        loss = (err * w).sum() / w.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        decay = 0.999 if init else min(0.999, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.mul_(decay).add_(pm.detach(), alpha=1 - decay)
        avg = loss.item() if avg is None else 0.98 * avg + 0.02 * loss.item()
        if step % 50 == 0:
            print(f"{name} step {step}/{steps}: loss {avg:.4f} lr {lr:.2e} "
                  f"({time.time() - t0:.0f} s)", flush=True)
        if step % 250 == 0 or step == steps:
            torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "opt": opt.state_dict(),
                        "step": step, "gen": g.get_state()}, ck + ".tmp")
            os.replace(ck + ".tmp", ck)
    ema.save_pretrained(os.path.join(out, "model"))
    with open(done, "w") as f:
        f.write(f"{steps}\n")


# ---------------------------------------------------------------------------------------------------
# the picture test's prompts: held-out combinations only


def held_out_prompts(seed, n_single, n_double, distinct=False, exclude=()):
    """n_single one-shape then n_double two-shape prompts whose first shape's (colour, shape, place,
    background) was held out of training (two shapes far apart), with what each picture must show:
    distinct, no two with the same scene; none of whose text is in exclude."""
    rng = random.Random(seed)
    singles, doubles, seen = [], [], set()
    while len(singles) < n_single or len(doubles) < n_double:
        two = len(singles) >= n_single
        bg = rng.choice(list(COLOURS))
        shapes = []
        for _ in range(2 if two else 1):
            colour = rng.choice([c for c in COLOURS if c != bg])
            shape, place = rng.choice(SHAPES), rng.choice(list(PLACES))
            shapes.append({"colour": colour, "shape": shape, "place": place,
                           "size": rng.choice(["small", "large"]), "say_size": rng.random() < 0.6})
        if not held_out(shapes[0]["colour"], shapes[0]["shape"], shapes[0]["place"], bg):
            continue
        if two and (shapes[0]["place"] == shapes[1]["place"] or
                    not far_apart(shapes[0]["place"], shapes[1]["place"])):
            continue
        key = tuple((s["colour"], s["shape"], s["place"]) for s in shapes) + (bg,)
        if distinct and key in seen:
            continue
        seen.add(key)
        text = caption(rng, {"bg": bg, "shapes": shapes})
        if text in exclude:
            continue
        (doubles if two else singles).append(
            {"prompt": text, "background": bg,
             "shapes": [{"colour": s["colour"], "shape": s["shape"], "place": s["place"]} for s in shapes]})
    return singles + doubles


def test_prompts(path, n_single=32, n_double=8):
    """tests/data/picture/prompts.json: the picture test's prompts, all distinct."""
    write_prompts(path, held_out_prompts(1506, n_single, n_double, distinct=True), "")
    print(f"test prompts: {path} ({n_single} one-shape, {n_double} two-shape)")


def validation_prompts(path, test_path, n=160):
    """tests/data/picture/validation.json: n more held-out prompts (three in four one-shape), none
    of them the test's, for choosing between trained models without looking at the test's; the
    picture test's validation case judges them (seeds 5000 + i)."""
    test = {p["prompt"] for p in json.load(open(test_path))["prompts"]}
    write_prompts(path, held_out_prompts(4242, n * 3 // 4, n - n * 3 // 4, exclude=test),
                  ", none of them the picture test's (prompts.json): for choosing between models")
    print(f"validation prompts: {path} ({n * 3 // 4} one-shape, {n - n * 3 // 4} two-shape)")


def write_prompts(path, prompts, what):
    """A picture prompt set: the prompts and what each must show, with the drawings' geometry."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json(path, {
        "about": "written by tests/golden/train_default_model.py: prompts of combinations of shape "
                 "colour, shape, place and background never drawn for training" + what + ", and the "
                 "geometry of the drawings (image side, place centres in units of the side, the "
                 "largest shape radius and position jitter in units of the side)",
        "size": SIZE, "palette": {k: list(v) for k, v in COLOURS.items()},
        "places": {k: list(v) for k, v in PLACES.items()},
        "max_radius": RADIUS["large"] * 1.1, "jitter": 3.0 / SIZE,
        "prompts": prompts})


# ---------------------------------------------------------------------------------------------------
# 6: export and contact sheet


# the README's contact sheet's prompts (scripts/readme_pictures.py draws them with weft)
sys.path.insert(0, gc.repo_path("scripts"))
from readme_pictures import SHEET  # noqa: E402


def phase_export(state, out_dir, name="transformer"):
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel, T5EncoderModel

    d = os.path.join(state, "encoders")
    tok = load_tokenizers(state)
    transformer = FluxTransformer2DModel.from_pretrained(os.path.join(state, name, "model"))
    sched = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
        base_image_seq_len=256, max_image_seq_len=4096)
    pipe = FluxPipeline(scheduler=sched, vae=load_vae(state),
                        text_encoder=CLIPTextModel.from_pretrained(os.path.join(d, "text_encoder")),
                        tokenizer=tok[0],
                        text_encoder_2=T5EncoderModel.from_pretrained(os.path.join(d, "text_encoder_2")),
                        tokenizer_2=tok[1], transformer=transformer.to(torch.bfloat16))
    readme = os.path.join(out_dir, "README.md")
    keep = open(readme, encoding="utf-8").read() if os.path.exists(readme) else None
    shutil.rmtree(out_dir, ignore_errors=True)
    pipe.save_pretrained(out_dir)
    # the tokenizers' files as FLUX.1's folders ship them (transformers 5 saves CLIP's as
    # tokenizer.json alone; weft reads vocab.json and merges.txt, and T5's spiece.model)
    for name in ("tokenizer", "tokenizer_2"):
        shutil.rmtree(os.path.join(out_dir, name))
        shutil.copytree(os.path.join(state, "tokenizers", name), os.path.join(out_dir, name))
    if keep is not None:
        with open(readme, "w", encoding="utf-8", newline="\n") as f:
            f.write(keep)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(out_dir) for f in fs)
    print(f"export: {out_dir}, {total / 1e6:.1f} MB")


GOLDEN_PROMPT = "a small yellow star in the top left corner, black background"


def golden(out_dir, path):
    """tests/data/picture/golden.safetensors: FluxPipeline on the exported folder (float32 compute
    on its stored weights) from seeded initial latents, at the model's defaults: latents_init
    [1, 64, 64], latents_final [1, 64, 64] and image_u8 [128, 128, 3]; the prompt in its metadata."""
    from diffusers import FluxPipeline
    from safetensors.torch import save_file

    pipe = FluxPipeline.from_pretrained(out_dir).to(torch.float32)
    init = torch.randn(1, (SIZE // 16) ** 2, 64, generator=torch.Generator().manual_seed(1507))
    kw = dict(height=SIZE, width=SIZE, num_inference_steps=28, max_sequence_length=T5_LEN)
    final = pipe(GOLDEN_PROMPT, latents=init.clone(), output_type="latent", **kw).images
    image = pipe(GOLDEN_PROMPT, latents=init.clone(), output_type="np", **kw).images[0]
    u8 = torch.from_numpy((image * 255).round().clip(0, 255).astype(np.uint8))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file({"latents_init": init.contiguous(), "latents_final": final.contiguous(),
               "image_u8": u8.contiguous()}, path,
              metadata={"prompt": GOLDEN_PROMPT, "steps": "28", "size": str(SIZE)})
    print(f"golden: {path}")


def sheet(out_dir, path, steps=28):
    from diffusers import FluxPipeline

    pipe = FluxPipeline.from_pretrained(out_dir).to(torch.float32)
    tiles = []
    for i, p in enumerate(SHEET):
        img = pipe(p, height=SIZE, width=SIZE, num_inference_steps=steps, guidance_scale=1.0,
                   max_sequence_length=T5_LEN, generator=torch.Generator().manual_seed(i)).images[0]
        tiles.append(img)
    w = 4
    grid = Image.new("RGB", (w * SIZE, math.ceil(len(tiles) / w) * SIZE))
    for i, t in enumerate(tiles):
        grid.paste(t, ((i % w) * SIZE, (i // w) * SIZE))
    grid.save(path)
    print(f"contact sheet: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state", default=gc.repo_path("build-train"), help="resumable state (default build-train/)")
    ap.add_argument("--out", default=gc.repo_path("models", "flux-tiny"), help="the pipeline folder written")
    ap.add_argument("--sheet", action="store_true", help="only write the contact sheet of --out")
    ap.add_argument("--prompts", action="store_true",
                    help="only write tests/data/picture/prompts.json and validation.json")
    ap.add_argument("--vae-from", metavar="DIR",
                    help="take the VAE from this AutoencoderKL folder instead of training one "
                         "(models/flux-tiny/vae: the VAE the committed model was built with)")
    ap.add_argument("--continue-from", metavar="DIR",
                    help="instead of the transformer phase, continue training this "
                         "FluxTransformer2DModel folder (--more-steps, a cosine from "
                         "--more-peak) and export that")
    ap.add_argument("--more-steps", type=int, default=TR_MORE_STEPS, help=f"default {TR_MORE_STEPS}")
    ap.add_argument("--more-peak", type=float, default=TR_MORE_PEAK, help=f"default {TR_MORE_PEAK}")
    ap.add_argument("--two-share", type=float, metavar="F",
                    help="--continue-from: draw this share of each batch from the two-shape scenes "
                         "(default: all scenes alike, 27 %% two-shape)")
    ap.add_argument("--seed", type=int, default=1508,
                    help="--continue-from: the batch and noise seed (default 1508; give another "
                         "when chaining continuations)")
    a = ap.parse_args()
    gc.setup()
    torch.use_deterministic_algorithms(False)
    test_json = gc.repo_path("tests", "data", "picture", "prompts.json")
    if a.prompts:
        test_prompts(test_json)
        validation_prompts(gc.repo_path("tests", "data", "picture", "validation.json"), test_json)
        return
    os.makedirs(a.state, exist_ok=True)
    if not a.sheet:
        t0 = time.time()
        phase_tokenizers(a.state)
        phase_encoders(a.state)
        if a.vae_from and not os.path.exists(os.path.join(a.state, "vae", "done")):
            shutil.rmtree(os.path.join(a.state, "vae"), ignore_errors=True)
            shutil.copytree(a.vae_from, os.path.join(a.state, "vae", "model"))
            open(os.path.join(a.state, "vae", "done"), "w").close()
        phase_vae(a.state)
        phase_data(a.state)
        if a.continue_from:
            phase_transformer(a.state, "transformer-more", a.more_steps, a.more_peak, a.seed, a.continue_from,
                              a.two_share)
            phase_export(a.state, a.out, "transformer-more")
        else:
            phase_transformer(a.state)
            phase_export(a.state, a.out)
        test_prompts(test_json)
        validation_prompts(gc.repo_path("tests", "data", "picture", "validation.json"), test_json)
        golden(a.out, gc.repo_path("tests", "data", "picture", "golden.safetensors"))
        print(f"trained in {time.time() - t0:.0f} s (this run)")
    sheet(a.out, os.path.join(a.state, "contact_sheet.png"))


if __name__ == "__main__":
    main()
