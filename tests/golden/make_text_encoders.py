"""Tiny random-weight text encoders in transformers' format and their outputs (real transformers).

Run from the repository root (CPU only, a few seconds):

    /opt/goldenv/bin/python tests/golden/make_text_encoders.py

Environment: torch 2.15 (CPU), transformers 5.24. Not run in CI; outputs are committed. Re-running
regenerates every file bit-identically.

What it writes (deletes and rebuilds tests/data/text/encoders/ and tests/data/text/golden/):

  tests/data/text/encoders/<name>/    save_pretrained of a CLIPTextModel / T5EncoderModel:
    config.json, model.safetensors
      clip-tiny        CLIPTextModel: vocab 1000, hidden 64, 4 heads, intermediate 128, 2 layers,
                       77 positions, quick_gelu, eos_token_id 2 (CLIP-L's own value: the pooled
                       token is the highest id's); F32
      clip-tiny-eos    the same with eos_token_id 7 (the pooled token is the first id 7); F32
      clip-tiny-bf16   clip-tiny's weights cast to BF16
      t5-tiny          T5EncoderModel (T5 v1.1: gated-gelu, gelu_new): vocab 600, d_model 64, 4 heads
                       x d_kv 16, d_ff 96, 2 layers, 32 buckets, max_distance 128; F32
      t5-tiny-bf16     t5-tiny's weights cast to BF16
  tests/data/text/golden/<name>_<len>.safetensors
      input_ids [1, len] (I64), last_hidden_state [1, len, D] (F32), and for CLIP pooler_output [1, D]:
      the model called as FluxPipeline calls it (input_ids only, output_hidden_states=False), in
      the weights' dtype (BF16 outputs stored as F32). Lengths: CLIP 77 (the padded prompt) and 20;
      T5 77, 300 (relative positions past max_distance) and 8.

Weights are random (torch.manual_seed per model, then a deterministic re-initialisation: linears
N(0, 0.49/fan_in), biases N(0, 0.1^2), norm weights 1 + N(0, 0.1^2), embeddings N(0, 1), T5's
relative attention bias N(0, 0.25)) so every parameter matters. The scales keep each residual branch
smaller than the stream it adds to, as in trained encoders: with linears N(0, 1/fan_in) instead the
tiny T5 amplifies bf16's rounding until transformers' own BF16 run is 2% (relative L2) from its F32
run on the same weights; with these scales it is 0.5%, CLIP's 0.4%.
"""

import sys

sys.dont_write_bytecode = True

import math
import os
import shutil

import torch

import golden_common as gc

OUT = gc.repo_path("tests", "data", "text")
ENC = os.path.join(OUT, "encoders")
GOLD = os.path.join(OUT, "golden")

CLIP_CFG = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
                layer_norm_eps=1e-5, bos_token_id=0, eos_token_id=2, pad_token_id=1)
T5_CFG = dict(vocab_size=600, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4,
              relative_attention_num_buckets=32, relative_attention_max_distance=128,
              feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, is_encoder_decoder=False,
              use_cache=False, tie_word_embeddings=False, dropout_rate=0.0)


def reinit(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "relative_attention_bias" in name:
                t = torch.randn(p.shape, generator=g) * 0.5
            elif "embedding" in name or name.endswith("shared.weight") or "embed_tokens" in name:
                t = torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                t = torch.randn(p.shape, generator=g) * 0.1
            elif p.ndim == 1:  # layer norm weights
                t = 1.0 + torch.randn(p.shape, generator=g) * 0.1
            else:
                t = torch.randn(p.shape, generator=g) * 0.7 / math.sqrt(p.shape[1])
            p.copy_(t.to(p.dtype))


def save(model, name):
    d = os.path.join(ENC, name)
    model.save_pretrained(d, safe_serialization=True)
    return d


def clip_ids(n, seed, eos, legacy):
    g = torch.Generator().manual_seed(seed)
    if legacy:  # a prompt as the tokenizer pads it: start, words, then the end id repeated
        words = torch.randint(3, 990, (min(25, n - 2),), generator=g)
        ids = torch.cat([torch.tensor([0]), words, torch.full((n - 1 - len(words),), 999)])
    else:  # the end id twice: the first one is pooled
        ids = torch.randint(10, 999, (n,), generator=g)
        ids[min(11, n - 2)] = eos
        ids[n - 1] = eos
    return ids[None, :].to(torch.int64)


def t5_ids(n, seed):
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(3, 600, (max(1, n * 2 // 3),), generator=g)
    ids = torch.cat([words, torch.tensor([1]), torch.zeros(n - len(words) - 1, dtype=torch.int64)])
    return ids[None, :].to(torch.int64)


def golden(model, name, ids, clip):
    with torch.no_grad():
        out = model(ids, output_hidden_states=False)
    t = {"input_ids": ids, "last_hidden_state": out.last_hidden_state}
    if clip:
        t["pooler_output"] = out.pooler_output
    path = os.path.join(GOLD, f"{name}_{ids.shape[1]}.safetensors")
    gc.save_tensors(path, t, keep_dtype=("input_ids",))
    gc.log(f"{name}_{ids.shape[1]}: last_hidden_state std {out.last_hidden_state.float().std().item():.4f}")


def main():
    gc.setup()
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel
    from transformers.utils import logging as tlog

    tlog.set_verbosity_error()
    for d in (ENC, GOLD):
        if os.path.isdir(d):
            shutil.rmtree(d)
    os.makedirs(GOLD)

    torch.manual_seed(801)
    clip = CLIPTextModel(CLIPTextConfig(**CLIP_CFG)).eval()
    reinit(clip, 801)
    save(clip, "clip-tiny")
    for n, seed in ((77, 811), (20, 812)):
        golden(clip, "clip-tiny", clip_ids(n, seed, 2, True), True)

    clip_eos = CLIPTextModel(CLIPTextConfig(**dict(CLIP_CFG, eos_token_id=7))).eval()
    clip_eos.load_state_dict(clip.state_dict())
    save(clip_eos, "clip-tiny-eos")
    for n, seed in ((77, 821), (20, 822)):
        golden(clip_eos, "clip-tiny-eos", clip_ids(n, seed, 7, False), True)

    clip_bf16 = clip.to(torch.bfloat16)
    save(clip_bf16, "clip-tiny-bf16")
    golden(clip_bf16, "clip-tiny-bf16", clip_ids(77, 811, 2, True), True)

    torch.manual_seed(802)
    t5 = T5EncoderModel(T5Config(**T5_CFG)).eval()
    reinit(t5, 802)
    save(t5, "t5-tiny")
    for n, seed in ((77, 831), (300, 832), (8, 833)):
        golden(t5, "t5-tiny", t5_ids(n, seed), False)
    t5_bf16 = t5.to(torch.bfloat16)
    save(t5_bf16, "t5-tiny-bf16")
    for n, seed in ((77, 831), (300, 832)):
        golden(t5_bf16, "t5-tiny-bf16", t5_ids(n, seed), False)
    gc.list_written(ENC)
    gc.list_written(GOLD)


if __name__ == "__main__":
    main()
