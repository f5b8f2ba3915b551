#!/usr/bin/env python3
"""End-to-end fixtures for `nunchaku run`: tiny random fp32 models (transformers) wearing the
trained fixture tokenizers of testdata/tokenizers, and what transformers generates for them.

For each fixture, testdata/run/<name>/ gets config.json + model.safetensors (save_pretrained),
the tokenizer files, and expected.json: per prompt the prompt ids (the chat template applied
by apply_chat_template, or the raw text with the tokenizer's special tokens), the greedy
continuation ids from model.generate, the text decoded with skip_special_tokens=True and the
finish reason ("stop" at an EOS id, else "length").

Run with a Python that has torch, transformers 4.57 (5.x needs torch >= 2.6):
    /tmp/fxenv/bin/python scripts/make_run_fixture.py
"""
import json
import os
import shutil

import torch
import transformers
from transformers import AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MAX_NEW = 12
PROMPTS = ["Once upon a time", "The quick brown fox", "hello world", "Tell me a story about a cat."]
CHATS = [[{"role": "user", "content": "What is two plus two?"}],
         [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]]

FIXTURES = {
    # (tokenizer fixture, model class, config kwargs)
    "llama-spm": ("llama2-spm", transformers.LlamaConfig, dict(bos_token_id=1, eos_token_id=2)),
    "qwen2-bpe": ("qwen2-bpe", transformers.Qwen2Config, dict(eos_token_id=2)),
}


def main():
    torch.manual_seed(1234)
    for name, (tok_name, cfg_cls, extra) in FIXTURES.items():
        src = os.path.join(ROOT, "testdata", "tokenizers", tok_name)
        dst = os.path.join(ROOT, "testdata", "run", name)
        os.makedirs(dst, exist_ok=True)
        for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
            if os.path.exists(os.path.join(src, f)):
                shutil.copy(os.path.join(src, f), os.path.join(dst, f))
        tok = AutoTokenizer.from_pretrained(dst)
        cfg = cfg_cls(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=len(tok), max_position_embeddings=256,
                      tie_word_embeddings=False, **extra)
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
        # Larger weights than the default init so greedy paths differ between prompts.
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0, 0.3)
        model.save_pretrained(dst, safe_serialization=True)
        gen_cfg = json.load(open(os.path.join(src, "generation_config.json"))) if os.path.exists(
            os.path.join(src, "generation_config.json")) else {}
        eos = gen_cfg.get("eos_token_id", cfg.eos_token_id)
        eos = eos if isinstance(eos, list) else [eos]
        # save_pretrained wrote its own generation_config.json; keep the tokenizer fixture's.
        if os.path.exists(os.path.join(src, "generation_config.json")):
            shutil.copy(os.path.join(src, "generation_config.json"), os.path.join(dst, "generation_config.json"))
        cases = []
        for p in PROMPTS:
            cases.append(("raw", p, tok(p, add_special_tokens=True)["input_ids"]))
        if tok.chat_template:
            for msgs in CHATS:
                ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
                cases.append(("chat", msgs, list(ids)))
        out = []
        for mode, prompt, ids in cases:
            with torch.no_grad():
                g = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=eos,
                                   pad_token_id=eos[0], attention_mask=torch.ones(1, len(ids), dtype=torch.long))
            new = g[0, len(ids):].tolist()
            reason = "length"
            if new and new[-1] in eos:
                new, reason = new[:-1], "stop"
            out.append({"mode": mode, "prompt": prompt, "prompt_ids": ids, "completion_ids": new,
                        "text": tok.decode(new, skip_special_tokens=True), "finish_reason": reason})
        json.dump({"transformers": transformers.__version__, "max_tokens": MAX_NEW, "eos_ids": eos, "cases": out},
                  open(os.path.join(dst, "expected.json"), "w"), indent=1, ensure_ascii=False)
        print(name, [(c["finish_reason"], len(c["completion_ids"])) for c in out])


if __name__ == "__main__":
    main()
