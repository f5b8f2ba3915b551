#!/usr/bin/env python3
"""Checks that transformers 5 loads nunchaku's accelerate device_map of multimodal checkpoints
(issue 34): tiny random Mistral3, Gemma 3, Qwen2-VL and LLaVA models saved by transformers,
planned by `nunchaku plan --format accelerate` on a budget that splits the language model,
then loaded with from_pretrained(device_map=...). No GPU here: the map's GPU entries load on
the CPU and its CPU entries are offloaded to disk (the same key matching).
With --fixtures DIR it also writes DIR/<case>/{config.json,tensors.json,params.json}: the
saved checkpoint's header (names, dtypes, shapes as on disk) and the parameter
names of the model transformers builds in memory, and the budget that split it, for tests/test_multimodal_map.cpp.
Usage: scripts/check_multimodal_device_map.py BUILD/nunchaku [--fixtures testdata/arch-mm]"""
import json, os, subprocess, sys, tempfile

import torch
import transformers as tf
from safetensors import safe_open

nunchaku = sys.argv[1] if len(sys.argv) > 1 else "build/nunchaku"
fixtures = sys.argv[sys.argv.index("--fixtures") + 1] if "--fixtures" in sys.argv else None

text = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256)
vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=28,
              patch_size=14)


def cases():
    yield "mistral3", tf.Mistral3Config(text_config=tf.MistralConfig(**text),
                                        vision_config=tf.PixtralVisionConfig(**vision, head_dim=16),
                                        spatial_merge_size=1)
    yield "gemma3", tf.Gemma3Config(text_config=tf.Gemma3TextConfig(**text, sliding_window=32),
                                    vision_config=tf.SiglipVisionConfig(**vision), mm_tokens_per_image=4)
    yield "qwen2_vl", tf.Qwen2VLConfig(text_config=dict(**text, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
                                       vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2,
                                                          patch_size=14, spatial_merge_size=2, temporal_patch_size=2))
    yield "llava", tf.LlavaConfig(text_config=tf.LlamaConfig(**text), vision_config=tf.CLIPVisionConfig(**vision),
                                  image_seq_length=4)


failed = 0
for name, cfg in cases():
    with tempfile.TemporaryDirectory() as d:
        torch.manual_seed(0)
        model = tf.AutoModelForImageTextToText.from_config(cfg)
        model.save_pretrained(d)
        parameters = sorted(n for n, _ in model.named_parameters())
        # Budgets down from the estimate's total until the plan splits the model over the GPU
        # and the CPU (the plan's own accounting decides where that is).
        flags = ["--context", "64", "--overhead", "cuda_context=0", "--overhead", "cublas_workspace=0"]
        est = json.loads(subprocess.run([nunchaku, "estimate", d, "--json"] + flags, capture_output=True, text=True,
                                        check=True).stdout)
        budget = est["total_bytes"]
        while budget > 64 * 1024:
            out = subprocess.run([nunchaku, "plan", d, "--vram", f"{budget // 1024}K", "--cpu-ram", "1G", "--format",
                                  "accelerate"] + flags, capture_output=True, text=True)
            if out.returncode != 0 or len(set(json.loads(out.stdout).values())) > 1:
                break
            budget = budget * 9 // 10
        if out.returncode != 0:
            print(f"FAIL {name}: plan exit {out.returncode}: {out.stderr.strip()}")
            failed += 1
            continue
        dm = json.loads(out.stdout)
        local = {k: ("cpu" if v == 0 else "disk" if v == "cpu" else v) for k, v in dm.items()}
        try:
            m = tf.AutoModelForImageTextToText.from_pretrained(d, device_map=local, offload_folder=d + "/offload")
            m.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, do_sample=False)
            devices = sorted(set(str(v) for v in dm.values()))
            assert len(devices) > 1, f"the plan did not split the model: {dm}"
            print(f"ok   {name}: {len(dm)} map entries on {devices}; from_pretrained and generate run")
        except Exception as e:  # what transformers says about the map
            print(f"FAIL {name}: {type(e).__name__}: {str(e)[:600]}")
            failed += 1
        if fixtures:
            dst = os.path.join(fixtures, name)
            os.makedirs(dst, exist_ok=True)
            tensors = []
            for f in sorted(x for x in os.listdir(d) if x.endswith(".safetensors")):
                with safe_open(os.path.join(d, f), framework="pt") as st:
                    for k in st.keys():
                        s = st.get_slice(k)
                        tensors.append([k, s.get_dtype(), list(s.get_shape())])
            json.dump(json.load(open(os.path.join(d, "config.json"))), open(os.path.join(dst, "config.json"), "w"), indent=1)
            with open(os.path.join(dst, "tensors.json"), "w") as f:
                f.write("[\n" + ",\n".join(json.dumps(t) for t in tensors) + "\n]\n")
            json.dump({"transformers": tf.__version__, "class": type(model).__name__, "plan_flags": flags,
                       "split_vram": f"{budget // 1024}K", "parameters": parameters},
                      open(os.path.join(dst, "params.json"), "w"), indent=0)
sys.exit(1 if failed else 0)
