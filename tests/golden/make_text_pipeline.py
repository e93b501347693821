"""A tiny FluxPipeline with both text encoders and their tokenizers, and its text-to-image goldens
(real Diffusers: FluxPipeline called with a prompt string).

Run from the repository root (CPU only, ~20 s), after make_tokenizers.py (whose tokenizer folders the
pipeline links to):

    /opt/goldenv/bin/python tests/golden/make_text_pipeline.py

Environment: torch 2.15 (CPU), diffusers 0.42.1, transformers 5.24. Not run in CI; outputs are
committed. Re-running regenerates every file bit-identically.

What it writes (deletes and rebuilds tests/data/text/pipeline/ and tests/data/text/pipeline_golden/):

  tests/data/text/pipeline/            FluxPipeline.save_pretrained output, every component present:
    model_index.json
    tokenizer -> ../tokenizer          symbolic links to make_tokenizers.py's folders (CLIP-L's real
    tokenizer_2 -> ../tokenizer_2      vocabulary; the small unigram model), the files FLUX.1 ships
    text_encoder/                      CLIPTextModel: vocab 49408, hidden 32, 2 heads, intermediate 64,
                                       2 layers, 77 positions, quick_gelu, eos_token_id 2 (CLIP-L's); BF16
    text_encoder_2/                    T5EncoderModel (v1.1): vocab 600, d_model 32, 2 heads x 16, d_ff 48,
                                       2 layers; BF16
    transformer/                       FluxTransformer2DModel: 4 heads x 8, axes (2, 2, 4), joint 32,
                                       pooled 32, 1 double + 1 single block, guidance_embeds; BF16
    vae/                               AutoencoderKL: block_out_channels (32, 32), 1 layer per block,
                                       16 latent channels (2 pixels per latent); F32
    scheduler/                         FlowMatchEulerDiscreteScheduler, FLUX.1-dev settings
  tests/data/text/pipeline_golden/
    encode_<i>.safetensors             FluxPipeline.encode_prompt(PROMPTS[i], max_sequence_length=L):
                                       prompt_embeds [1, L, 32], pooled_prompt_embeds [1, 32] (F32), the
                                       tokenizers' input_ids (I64); L in each file's metadata
    pipeline_0.safetensors             FluxPipeline(PROMPTS[0], 32x48, 3 steps, guidance 3.5,
                                       max_sequence_length 64, latents=latents_init): latents_init,
                                       latents_final [1, 24, 64] and image_u8 [32, 48, 3]
    prompts.json                       the prompts and the max_sequence_length of each encode_<i>

Every component runs in float32 compute on its stored weights (pipe.to(torch.float32) after loading, as
make_default_model.py's golden does), so weft's f32 run can be held to 1e-4.
"""

import sys

sys.dont_write_bytecode = True

import json
import os
import shutil

import torch

import golden_common as gc
from make_text_encoders import reinit as reinit_text

OUT = gc.repo_path("tests", "data", "text", "pipeline")
GOLD = gc.repo_path("tests", "data", "text", "pipeline_golden")

PROMPTS = [
    ("a photo of a red fox sitting in the snow, highly detailed", 64),
    ("A lighthouse at dusk; waves crashing -- cinematic lighting, 35mm, f/1.8", 512),
    (" ".join(["a tiny robot painting a portrait of an astronaut cat in a sunlit studio"] * 8), 64),
    ("東京の夜景 🐱 naïve café", 16),
]


def build():
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTokenizer, T5Config, T5EncoderModel,
                              T5TokenizerFast)

    torch.manual_seed(901)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=1, num_single_layers=1,
                                         attention_head_dim=8, num_attention_heads=4, joint_attention_dim=32,
                                         pooled_projection_dim=32, guidance_embeds=True, axes_dims_rope=(2, 2, 4))
    gc.reinit_transformer(transformer, 901, mod_gain=1.5)
    transformer = transformer.to(torch.bfloat16)
    torch.manual_seed(902)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2,
                        up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=(32, 32),
                        layers_per_block=1, latent_channels=16, norm_num_groups=32, use_quant_conv=False,
                        use_post_quant_conv=False, scaling_factor=0.3611, shift_factor=0.1159)
    gc.reinit_vae(vae, 902, gain=1.0, conv_out_gain=0.8)
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True,
                                                base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
                                                max_image_seq_len=4096)
    torch.manual_seed(903)
    clip = CLIPTextModel(CLIPTextConfig(vocab_size=49408, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
                                        hidden_act="quick_gelu", layer_norm_eps=1e-5, bos_token_id=0,
                                        eos_token_id=2, pad_token_id=1)).eval()
    reinit_text(clip, 903)
    torch.manual_seed(904)
    t5 = T5EncoderModel(T5Config(vocab_size=600, d_model=32, d_kv=16, d_ff=48, num_layers=2, num_heads=2,
                                 relative_attention_num_buckets=32, relative_attention_max_distance=128,
                                 feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6,
                                 is_encoder_decoder=False, use_cache=False, tie_word_embeddings=False,
                                 dropout_rate=0.0)).eval()
    reinit_text(t5, 904)
    text_dir = gc.repo_path("tests", "data", "text")
    tok = CLIPTokenizer.from_pretrained(os.path.join(text_dir, "tokenizer"))
    tok2 = T5TokenizerFast.from_pretrained(os.path.join(text_dir, "tokenizer_2"))
    pipe = FluxPipeline(scheduler=scheduler, vae=vae, transformer=transformer,
                        text_encoder=clip.to(torch.bfloat16), tokenizer=tok,
                        text_encoder_2=t5.to(torch.bfloat16), tokenizer_2=tok2)
    pipe.save_pretrained(OUT, safe_serialization=True)
    for name in ("tokenizer", "tokenizer_2"):  # the files FLUX.1 ships, not transformers 5's re-save
        shutil.rmtree(os.path.join(OUT, name))
        os.symlink(os.path.join("..", name), os.path.join(OUT, name))


def golden():
    from diffusers import FluxPipeline
    from safetensors.torch import save_file

    pipe = FluxPipeline.from_pretrained(OUT)
    pipe.to(torch.float32)  # float32 compute on the stored weights
    pipe.set_progress_bar_config(disable=True)
    assert pipe.tokenizer.model_max_length == 77
    meta = []
    for i, (prompt, msl) in enumerate(PROMPTS):
        with torch.no_grad():
            pe, pooled, text_ids = pipe.encode_prompt(prompt=prompt, prompt_2=None, max_sequence_length=msl)
        ids = pipe.tokenizer(prompt, padding="max_length", max_length=77, truncation=True,
                             return_tensors="pt").input_ids
        ids2 = pipe.tokenizer_2(prompt, padding="max_length", max_length=msl, truncation=True,
                                return_tensors="pt").input_ids
        assert pe.shape == (1, msl, 32) and pooled.shape == (1, 32) and float(text_ids.abs().sum()) == 0
        t = {"prompt_embeds": pe.float().contiguous(), "pooled_prompt_embeds": pooled.float().contiguous(),
             "clip_input_ids": ids.contiguous(), "t5_input_ids": ids2.contiguous()}
        save_file(t, os.path.join(GOLD, f"encode_{i}.safetensors"), metadata={"max_sequence_length": str(msl)})
        meta.append({"prompt": prompt, "max_sequence_length": msl})
        gc.log(f"encode_{i}: prompt_embeds std {pe.std().item():.4f}, pooled std {pooled.std().item():.4f}")
    H, W = 32, 48
    S = (H // 4) * (W // 4)
    latents_init = gc.randn((1, S, 64), 910)
    recorded = []

    def on_step_end(p, i, t, kw):
        recorded.append(kw["latents"].detach().clone())
        return {}

    prompt, msl = PROMPTS[0][0], 64
    with torch.no_grad():
        out = pipe(prompt=prompt, latents=latents_init.clone(), height=H, width=W, num_inference_steps=3,
                   guidance_scale=3.5, max_sequence_length=msl, output_type="np",
                   callback_on_step_end=on_step_end)
    image = torch.from_numpy(out.images[0].copy())
    u8 = (image * 255).round()
    gc.save_tensors(os.path.join(GOLD, "pipeline_0.safetensors"),
                    {"latents_init": latents_init, "latents_final": recorded[-1], "image_u8": u8.to(torch.uint8)},
                    keep_dtype=("image_u8",))
    gc.log(f"pipeline_0: latents_final std {recorded[-1].std().item():.4f}, image mean {image.mean().item():.4f}")
    with open(os.path.join(GOLD, "prompts.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    gc.setup()
    from transformers.utils import logging as tlog

    tlog.set_verbosity_error()
    for d in (OUT, GOLD):
        if os.path.isdir(d):
            shutil.rmtree(d)
    os.makedirs(GOLD)
    build()
    golden()
    gc.list_written(OUT)
    gc.list_written(GOLD)


if __name__ == "__main__":
    main()
