#!/usr/bin/env python3
"""Writes tiny random fp32 multimodal checkpoints whose language model the engine runs on
text, and transformers' own answers for text prompts (testdata/engine/multimodal.json):

    /work/venv-torch/bin/python scripts/make_engine_multimodal.py [name ...]  (transformers 5, torch)

Wrappers: Gemma3ForConditionalGeneration (gemma3 text model, SigLIP vision tower),
LlavaForConditionalGeneration (llama text model, CLIP vision tower),
Mistral3ForConditionalGeneration (mistral text model, Pixtral vision tower) and
Llama4ForConditionalGeneration (llama4 text model, Llama 4 vision model), each with a
one-layer vision tower and its projector, saved with save_pretrained (transformers 5.25 writes
the Hub's names: language_model.model.*, language_model.lm_head, vision_tower.*,
multi_modal_projector.*), wearing the llama2-spm fixture tokenizer (testdata/tokenizers).

Each golden: the prompt text and its ids (the tokenizer, BOS added), the first 32 greedy ids
of the wrapper model's own generate on input_ids alone (no pixel_values; eager attention,
do_sample=False), the logits of every prompt position, the logits of the last position of
prompt + continuation ("final logits"), and the bytes of the vision tower and projector
tensors (what run must not load). No network; seeded.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import AutoTokenizer, GenerationConfig

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "engine" / "multimodal"
TOKENIZER = ROOT / "testdata" / "tokenizers" / "llama2-spm"
SEED = 4321
NEW_TOKENS = 32
PROMPT = "The cat sat"

TEXT = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            max_position_embeddings=128, rms_norm_eps=1e-6, initializer_range=0.15, bos_token_id=1,
            eos_token_id=2, pad_token_id=0)
VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
              patch_size=14)


def gemma3(vocab):
    text = transformers.Gemma3TextConfig(**TEXT, vocab_size=vocab, num_hidden_layers=2, sliding_window=5,
                                         layer_types=["sliding_attention", "full_attention"],
                                         query_pre_attn_scalar=12,
                                         rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                             "rope_theta": 1000000.0},
                                                          "sliding_attention": {"rope_type": "default",
                                                                                "rope_theta": 10000.0}})
    cfg = transformers.Gemma3Config(text_config=text, vision_config=transformers.SiglipVisionConfig(**VISION),
                                    mm_tokens_per_image=4, image_token_index=vocab - 1, boi_token_index=vocab - 3,
                                    eoi_token_index=vocab - 2)
    return transformers.Gemma3ForConditionalGeneration, cfg


def llava(vocab):
    text = transformers.LlamaConfig(**TEXT, vocab_size=vocab, num_hidden_layers=2, tie_word_embeddings=False)
    vision = transformers.CLIPVisionConfig(**VISION, projection_dim=16)
    cfg = transformers.LlavaConfig(text_config=text, vision_config=vision, image_token_index=vocab - 1,
                                   vision_feature_layer=-1, image_seq_length=4, tie_word_embeddings=False)
    return transformers.LlavaForConditionalGeneration, cfg


def mistral3(vocab):
    text = transformers.MistralConfig(**TEXT, vocab_size=vocab, num_hidden_layers=2, sliding_window=None,
                                      tie_word_embeddings=False)
    vision = transformers.PixtralVisionConfig(**VISION, head_dim=8)
    cfg = transformers.Mistral3Config(text_config=text, vision_config=vision, image_token_index=vocab - 1,
                                      spatial_merge_size=2, vision_feature_layer=-1, tie_word_embeddings=False)
    return transformers.Mistral3ForConditionalGeneration, cfg


def llama4(vocab):
    """Llama 4's text model as in scripts/make_engine_llama4.py (chunks of 4 here: the 4-token
    prompt and its 32 ids cross nine boundaries; MoE on the odd layers, the last one NoPE),
    a one-layer Llama 4 vision model."""
    text = transformers.Llama4TextConfig(**dict(TEXT, intermediate_size=20), vocab_size=vocab, num_hidden_layers=4,
                                         intermediate_size_mlp=48, num_local_experts=4, num_experts_per_tok=1,
                                         interleave_moe_layer_step=2, attention_chunk_size=4, floor_scale=4,
                                         attn_scale=0.5, tie_word_embeddings=False)
    vision = transformers.Llama4VisionConfig(**VISION, vision_output_dim=16, projector_input_dim=16,
                                             projector_output_dim=32, pixel_shuffle_ratio=0.5)
    cfg = transformers.Llama4Config(text_config=text, vision_config=vision, image_token_index=vocab - 1,
                                    boi_token_index=vocab - 3, eoi_token_index=vocab - 2, tie_word_embeddings=False)
    return transformers.Llama4ForConditionalGeneration, cfg


WRAPPERS = {"gemma3": gemma3, "llava": llava, "mistral3": mistral3, "llama4": llama4}


def make_model(name, vocab, attempt):
    cls, cfg = WRAPPERS[name](vocab)
    cfg.text_config._attn_implementation = "eager"
    torch.manual_seed(SEED + sum(map(ord, name)) + 1000 * attempt)
    model = cls(cfg).to(torch.float32).eval()
    model.set_attn_implementation("eager")
    g = torch.Generator().manual_seed(SEED + 7)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "language_model" not in pname and "lm_head" not in pname:
                continue
            if "norm" in pname:  # gemma's 1 + w starts at 0, the others at 1
                p.copy_(p + 0.3 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in pname:
                p.mul_(0.25)
    return model


def reference(model, prompt):
    gc = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0,
                          eos_token_id=None, bos_token_id=None)
    ids_in = torch.tensor([prompt])
    with torch.no_grad():
        prompt_logits = model(input_ids=ids_in).logits[0].float().numpy()
        g = model.generate(input_ids=ids_in, generation_config=gc, output_scores=True, return_dict_in_generate=True)
        seq = g.sequences[0].tolist()
        ids = seq[len(prompt):]
        assert len(ids) == NEW_TOKENS, ids
        margin = min(float((lambda t: (t[0] - t[1]) / max(1e-9, abs(float(t[0]))))(torch.topk(s[0].float(), 2).values))
                     for s in g.scores)
        final = model(input_ids=torch.tensor([seq[:-1]])).logits[0, -1].float().numpy()
    # float32's shortest round-trip decimal (the golden stays small).
    as_list = lambda row: [float(str(v)) for v in row.astype(np.float32)]
    return {"prompt": prompt, "ids": ids, "prompt_logits": [as_list(r) for r in prompt_logits],
            "final_logits": as_list(final), "min_greedy_margin": margin}


def encoder_bytes(d):
    """Bytes of the tensors outside the language model, as stored (what run must not load)."""
    out = {"vision_tower": 0, "projector": 0}
    with safe_open(d / "model.safetensors", "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            if k.startswith(("vision_tower.", "model.vision_tower.", "vision_model.", "model.vision_model.")):
                out["vision_tower"] += t.numel() * t.element_size()
            elif k.startswith(("multi_modal_projector.", "model.multi_modal_projector.")):
                out["projector"] += t.numel() * t.element_size()
    return out


def main():
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    vocab = len(tok)
    prompt = tok(PROMPT).input_ids
    assert prompt[0] == tok.bos_token_id, prompt
    names = sys.argv[1:] or list(WRAPPERS)  # the others' goldens stay as written
    golden_path = OUT.parent / "multimodal.json"
    goldens = json.load(open(golden_path)) if golden_path.exists() else {}
    for name in names:
        # The first seed whose greedy path is varied, never the EOS (run stops there) and whose
        # top-2 logits stay apart (a relative gap far above fp32 summation-order noise).
        for attempt in range(40):
            model = make_model(name, vocab, attempt)
            ref = reference(model, prompt)
            if len(set(ref["ids"])) >= 6 and ref["min_greedy_margin"] > 1e-3 and tok.eos_token_id not in ref["ids"]:
                break
        else:
            raise SystemExit(f"{name}: no seed gives a varied, well-separated greedy path")
        d = OUT / name
        if d.exists():
            shutil.rmtree(d)
        model.save_pretrained(d, safe_serialization=True)
        (d / "generation_config.json").unlink(missing_ok=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(TOKENIZER / f, d / f)
        ref.update(text=PROMPT, seed_attempt=attempt, hf_class=type(model).__name__,
                   transformers=transformers.__version__, encoder_bytes=encoder_bytes(d))
        goldens[name] = ref
        print(name, ref["ids"][:8], "margin", ref["min_greedy_margin"], ref["encoder_bytes"])
    with open(golden_path, "w") as f:
        json.dump(goldens, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
