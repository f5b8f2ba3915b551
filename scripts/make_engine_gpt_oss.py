#!/usr/bin/env python3
"""Tiny random fp32 gpt-oss checkpoints written by transformers, and transformers' own answers
for them (testdata/engine/gpt_oss.json), for the engine's gpt-oss layers:

    python3 scripts/make_engine_gpt_oss.py      (a venv with transformers 5.25 and torch; CPU)

testdata/engine/gpt_oss: GptOssForCausalLM saved by save_pretrained (fp32 safetensors): 4
layers alternating sliding (window 6, so the 40-token sequences cross it) and full attention,
q/k/v/o biases, attention sinks, yarn rope scaling (factor 4 over an original 32 positions,
truncate false as the published models), 8 experts, top 4, router bias, the clamped SwiGLU
with its alpha and limit moved off transformers' defaults (1.3 and 1.0, so the clamp is hit).
transformers initialises the expert and attention biases to zero and the sinks small: here
every bias and sink is random and of the size of the other terms, so that a missing one
changes the greedy ids.

testdata/engine/gpt_oss_mxfp4: the same model with its experts as the published checkpoints
store them: *_blocks (U8 [E, out, in/32, 16], FP4 e2m1 codes, element 2j in the low nibble of
byte j, 2j+1 in the high one) and *_scales (U8 [E, out, in/32], E8M0: 2^(s - 127)), gate_up
rows interleaved as in memory (gate at even rows). Each block's scale is the smallest power
of two that puts its largest |value| within 6, values round to the nearest code. Its golden
is transformers running the dequantized weights (convert_moe_packed_tensors of
transformers/integrations/mxfp4.py, the function from_pretrained uses), and the
quantizer here is checked against that function before anything is written; the written
directory is loaded back with from_pretrained(quantization_config=Mxfp4Config(dequantize=True))
and must give the golden's final logits bit for bit.

As scripts/make_engine_families.py (whose model and reference code this reuses): a prompt, the
first 32 greedy ids of eager generate, the prompt's logits, the final logits. A seed is kept
only when the greedy path is varied and well separated and every routing decision is clear
(the k-th and (k+1)-th router logits of every token differ by more than 1e-3). Also the
yarn inverse frequencies and attention factor transformers computes for three rope configs
(YARN_CASES). No network.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_engine_families as fam  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers.integrations.mxfp4 import FP4_VALUES, convert_moe_packed_tensors  # noqa: E402

OUT = fam.OUT
TOP_K = 4
CONFIG = dict(model_type="gpt_oss", num_hidden_layers=4, num_local_experts=8, num_experts_per_tok=TOP_K,
              intermediate_size=32, hidden_size=32, head_dim=8, num_attention_heads=4, num_key_value_heads=2,
              sliding_window=6, swiglu_alpha=1.3, swiglu_limit=1.0, tie_word_embeddings=False,
              max_position_embeddings=128,
              rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
                               "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 32})


def make_model(attempt, config=None, expert_scale=1.0):
    """`expert_scale` multiplies the experts' weights (and biases): the GGUF twin's clamp sits
    at llama.cpp's fixed limit 7, which unscaled random experts never reach."""
    model = fam.make_model("gpt_oss", config or CONFIG, attempt)
    model.set_experts_implementation("eager")  # the loop over experts of modeling_gpt_oss.py
    g = torch.Generator().manual_seed(fam.SEED + 31 + attempt)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.copy_(torch.randn(p.shape, generator=g))
            elif name.endswith("bias") or name.endswith("_bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            if expert_scale != 1.0 and ".experts." in name:
                p.mul_(expert_scale)
    return model.eval()


def routing_gap(model, prompt_ids):
    gaps = []

    def hook(_mod, _args, out):
        top = torch.topk(out[0].float(), TOP_K + 1, dim=-1).values
        gaps.append(float((top[:, TOP_K - 1] - top[:, TOP_K]).min()))

    hooks = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.router")]
    with torch.no_grad():
        model(torch.tensor([prompt_ids]))
    for h in hooks:
        h.remove()
    assert gaps, "no router found"
    return min(gaps)


def quantize_mxfp4(w):
    """w [E, out, in] float -> blocks U8 [E, out, in/32, 16], scales U8 [E, out, in/32]."""
    E, rows, cols = w.shape
    assert cols % 32 == 0
    x = w.reshape(E, rows, cols // 32, 32).double()
    amax = x.abs().amax(dim=-1)
    exp = torch.where(amax > 0, torch.ceil(torch.log2(amax / 6.0)), torch.zeros_like(amax)).clamp(-127, 127)
    scaled = x / torch.pow(2.0, exp)[..., None]
    lut = torch.tensor(FP4_VALUES, dtype=torch.float64)
    codes = (scaled[..., None] - lut).abs().argmin(dim=-1)  # nearest code (+0 before -0)
    lo, hi = codes[..., 0::2], codes[..., 1::2]
    blocks = (lo | (hi << 4)).to(torch.uint8)
    scales = (exp + 127).to(torch.uint8)
    return blocks.contiguous(), scales.contiguous()


def mxfp4_model(model):
    """The model's experts quantized: (tensors for the file, the model with dequantized experts)."""
    tensors = {}
    with torch.no_grad():
        for name, mod in model.named_modules():
            if not name.endswith("mlp.experts"):
                continue
            for proj in ("gate_up_proj", "down_proj"):
                w = getattr(mod, proj)  # [E, in, out] in memory
                blocks, scales = quantize_mxfp4(w.transpose(1, 2))
                deq = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # transformers' own
                ours = (torch.tensor(FP4_VALUES, dtype=torch.float64)[torch.stack(
                    [blocks & 15, blocks >> 4], dim=-1).long()].reshape(*scales.shape, 32)
                        * torch.pow(2.0, scales.double() - 127)[..., None]).reshape(deq.shape[0], deq.shape[2], -1)
                assert torch.equal(ours.transpose(1, 2).float(), deq), "quantizer disagrees with transformers"
                w.copy_(deq)
                tensors[f"{name}.{proj}_blocks"] = blocks
                tensors[f"{name}.{proj}_scales"] = scales
        for k, v in model.state_dict().items():
            if not (k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj")):
                tensors[k] = v.contiguous()
    return tensors, model


def write_mxfp4(d, tensors, config):
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    cfg = config.to_dict()
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def check_mxfp4_load(d, golden):
    """transformers' own MXFP4 loader (dequantize=True, the CPU path) on the written directory
    must give the golden's final logits exactly: the file layout is the one it reads."""
    from transformers import AutoModelForCausalLM, Mxfp4Config
    m = AutoModelForCausalLM.from_pretrained(d, quantization_config=Mxfp4Config(dequantize=True),
                                             dtype=torch.float32, attn_implementation="eager")
    m.set_experts_implementation("eager")
    seq = golden["prompt"] + golden["ids"]
    with torch.no_grad():
        last = m(torch.tensor([seq[:-1]])).logits[0, -1].float()
    assert torch.equal(last, torch.tensor(golden["final_logits"])), "from_pretrained disagrees with the golden"


# yarn tables from transformers' _compute_yarn_parameters: the fixture's, gpt-oss-20b's
# published rope_scaling (head_dim 64) and a DeepSeek-style one (truncate true, mscale ratio).
YARN_CASES = {
    "fixture": CONFIG,
    "gpt-oss-20b": dict(model_type="gpt_oss", head_dim=64, hidden_size=2880, num_attention_heads=64,
                        max_position_embeddings=131072,
                        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                         "original_max_position_embeddings": 4096}),
    "truncate-mscale": dict(model_type="gpt_oss", head_dim=32, hidden_size=64, num_attention_heads=2,
                            max_position_embeddings=16384,
                            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                                             "beta_fast": 24.0, "beta_slow": 2.0, "mscale": 1.0,
                                             "mscale_all_dim": 0.8, "original_max_position_embeddings": 4096}),
}


def yarn_tables():
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    out = {}
    for name, kw in YARN_CASES.items():
        kw = dict(kw)
        cfg = AutoConfig.for_model(kw.pop("model_type"), **kw)
        inv_freq, scaling = ROPE_INIT_FUNCTIONS["yarn"](cfg)
        out[name] = {"head_dim": cfg.head_dim, "max_position_embeddings": cfg.max_position_embeddings,
                     "rope_parameters": cfg.rope_parameters, "inv_freq": [float(v) for v in inv_freq.float()],
                     "attention_factor": float(scaling)}
    return out


def main():
    for attempt in range(80):
        model = make_model(attempt)
        ref = fam.reference("gpt_oss", model, model.config.vocab_size)
        gap = routing_gap(model, ref["prompt"] + ref["ids"])
        if len(set(ref["ids"])) >= 6 and ref["min_greedy_margin"] > 1e-3 and gap > 1e-3:
            tensors, qmodel = mxfp4_model(make_model(attempt))
            qref = fam.reference("gpt_oss", qmodel, qmodel.config.vocab_size)
            qgap = routing_gap(qmodel, qref["prompt"] + qref["ids"])
            if len(set(qref["ids"])) >= 6 and qref["min_greedy_margin"] > 1e-3 and qgap > 1e-3:
                break
    else:
        raise SystemExit("gpt_oss: no seed gives a varied greedy path with clear routing")
    d = OUT / "gpt_oss"
    if d.exists():
        shutil.rmtree(d)
    model.save_pretrained(d, safe_serialization=True)
    (d / "generation_config.json").unlink(missing_ok=True)
    write_mxfp4(OUT / "gpt_oss_mxfp4", tensors, qmodel.config)
    ref.update(seed_attempt=attempt, min_routing_gap=gap)
    qref.update(seed_attempt=attempt, min_routing_gap=qgap)
    check_mxfp4_load(OUT / "gpt_oss_mxfp4", qref)
    goldens = {"gpt_oss": ref, "gpt_oss_mxfp4": qref, "yarn": yarn_tables()}
    for k, v in list(goldens.items())[:2]:
        print(k, v["ids"][:8], "margin", v["min_greedy_margin"], "routing gap", v["min_routing_gap"])
    with open(OUT / "gpt_oss.json", "w") as f:
        json.dump(goldens, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
