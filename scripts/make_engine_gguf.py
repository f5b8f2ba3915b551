#!/usr/bin/env python3
"""GGUF twins of the engine's fixtures, written by llama.cpp's convert_hf_to_gguf.py, and
llama.cpp's own greedy ids for them (llama-cpp-python):

    LLAMA_CPP=/path/to/llama.cpp /work/venv/bin/python scripts/make_engine_gguf.py [moe] [dense] [gpt_oss] [deepseek] [llama4]

LLAMA_CPP is a llama.cpp tree with convert_hf_to_gguf.py and gguf-py (the llama-cpp-python
0.3.36 sdist's vendor/llama.cpp; default /tmp/engine-llamacpp). Every set by default.

moe -> testdata/engine/moe-gguf/ (+ moe-gguf.json): stacked ffn_*_exps experts,
ffn_gate_inp, the qwen2moe shared expert. llama.cpp's qwen2moe and qwen3moe graphs put
experts on every layer, so those two are written from all-sparse variants of the configs in
scripts/make_engine_moe.py (same seeds); mixtral and olmoe are the committed HF fixtures.

gpt_oss -> testdata/engine/gpt_oss-gguf/ (+ gpt_oss-gguf.json): a gpt-oss with MXFP4 experts
as llama.cpp runs it (make_gpt_oss below), transformers' exact answers beside llama.cpp's.

deepseek -> testdata/engine/deepseek-gguf/ (+ deepseek-gguf.json): variants of
scripts/make_engine_deepseek.py's deepseek_v3 and deepseek_v2_lite with the default rope,
and deepseek_v2_lite as it is (yarn, mscale = mscale_all_dim 0.707: llama.cpp reads only
mscale_all_dim, from yarn_log_multiplier, and takes mscale equal to it), all with
q_lora_rank (llama.cpp requires it unless the layer count is a "lite" one), the V3 variant's
config given the Hub's "scoring_func": "sigmoid" (transformers 5 does not save it; without it
convert_hf_to_gguf writes no gating function and llama.cpp falls back to softmax). kv_b is
split into attn_k_b / attn_v_b by the converter; e_score_correction_bias becomes exp_probs_b.
Besides llama.cpp's ids and logits, transformers' for the variant.

llama4 -> testdata/engine/llama4-gguf/ (+ llama4-gguf.json): scripts/make_engine_llama4.py's
model with llama.cpp's fixed constants (make_llama4 below: no chunking or temperature within
its 40 tokens, so those stay checked against transformers only), transformers' answers beside
llama.cpp's.

dense -> testdata/engine/dense-gguf/ (+ dense-gguf.json): the recipe families of
scripts/make_engine_families.py (gemma, gemma2, gemma3, phi3, phi4-mini: longrope as the
rope_factors_long/short tensors) and the qwen3 / qwen2 fixtures of
scripts/make_engine_goldens.py, each converted as committed (general.name "tiny random
fixture": llama.cpp's vocabulary loader keys fix-ups to a name holding "phi3"). Besides
llama.cpp's answers, each golden holds transformers' for the model as llama.cpp reads the
file at its context (as_llama_cpp_reads: gemma2/3 without query_pre_attn_scalar, phi4-mini's
long factors), and transformers' ids for the fixture unchanged.

The fixtures have no tokenizer: the GGUFs get a byte vocabulary (GPT-2's byte characters of
bytes 0..vocab-2, then "xy" with the one merge "x y": llama.cpp refuses a BPE vocabulary
without merges) so both tools load them as text models; llama.cpp is fed ids. Each golden:
the prompt (make_engine_families.reference's for the name), 32 greedy ids of llama.cpp (f32,
one thread), the logits of the last prompt position (and, dense, of the last position before
the 32nd id) by llama.cpp and by transformers, transformers' ids, and (dense) llama.cpp's
context (64 asked, padded to 256 by llama.cpp). llama.cpp's own approximations (exp, SiLU, GELU through an f16 table) move its
logits by ~1e-3 of their scale.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_engine_families as fam  # noqa: E402
import make_engine_deepseek as ds  # noqa: E402
import make_engine_moe as moe  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "testdata" / "engine"
LLAMA_CPP = os.environ.get("LLAMA_CPP", "/tmp/engine-llamacpp")
MOE_ARCH = {"mixtral": "llama", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "olmoe": "olmoe"}
DENSE = {  # name -> (fixture, GGUF arch)
    "gemma": (ENGINE / "gemma", "gemma"),
    "gemma2": (ENGINE / "gemma2", "gemma2"),
    "gemma3": (ENGINE / "gemma3", "gemma3"),
    "phi3": (ENGINE / "phi3", "phi3"),
    "phi4-mini": (ENGINE / "phi4-mini", "phi3"),
    "qwen3": (ENGINE / "qwen3", "qwen3"),
    "qwen2": (ROOT / "testdata" / "models" / "qwen2", "qwen2"),
}


def byte_vocab(self):
    n = self.hparams["vocab_size"]
    chars = bytes_to_unicode()
    self.gguf_writer.add_tokenizer_model("gpt2")
    self.gguf_writer.add_tokenizer_pre("gpt-2")
    self.gguf_writer.add_token_list([chars[b] for b in range(n - 1)] + [chars[120] + chars[121]])  # "xy": the merge's
    self.gguf_writer.add_token_types([1] * n)
    self.gguf_writer.add_token_merges([chars[120] + " " + chars[121]])  # llama.cpp wants one
    self.gguf_writer.add_bos_token_id(1)
    self.gguf_writer.add_eos_token_id(2)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def convert(src, dst, model_name=None):
    """convert_hf_to_gguf on a copy of `src` (f32), with the byte vocabulary above. The copy
    gets a tokenizer.json of vocab_size entries: Gemma3Model trims token_embd to its count."""
    sys.path[:0] = [os.path.join(LLAMA_CPP, "gguf-py"), LLAMA_CPP]
    import importlib
    import pkgutil
    import convert_hf_to_gguf as c
    import conversion
    import conversion.base as base
    for m in pkgutil.iter_modules(conversion.__path__):
        importlib.import_module("conversion." + m.name)
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("conversion."):
            for obj in list(vars(mod).values()):
                if isinstance(obj, type) and issubclass(obj, base.TextModel):
                    obj.set_vocab = byte_vocab
    saved = sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / Path(src).name
        shutil.copytree(src, copy)
        n = json.load(open(copy / "config.json"))["vocab_size"]
        with open(copy / "tokenizer.json", "w") as f:
            json.dump({"model": {"vocab": {f"t{i}": i for i in range(n)}}, "added_tokens": []}, f)
        sys.argv = ["convert_hf_to_gguf", str(copy), "--outfile", str(dst), "--outtype", "f32"]
        if model_name:
            sys.argv += ["--model-name", model_name]
        try:
            c.main()
        finally:
            sys.argv = saved


def sparse_variant(name, kw):
    """The first seed of the all-sparse config with a varied path and clear routing (as make_engine_moe.py)."""
    for attempt in range(60):
        model = fam.make_model(name, kw, attempt)
        ref = fam.reference(name, model, model.config.vocab_size)
        gap = moe.routing_gap(model, ref["prompt"] + ref["ids"], kw["num_experts_per_tok"])
        if len(set(ref["ids"])) >= 6 and ref["min_greedy_margin"] > 1e-3 and gap > 1e-3:
            return model, ref
    raise SystemExit(f"{name}: no all-sparse seed gives a varied greedy path with clear routing")


def llama_cpp_greedy(path, prompt, n, n_ctx=64):
    """llama.cpp's n greedy ids after `prompt`, the logits of the last prompt position and of
    the position the last id was picked at, and the context llama.cpp allocated (it pads
    n_ctx to a multiple of 256)."""
    import llama_cpp
    llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_batch=64, n_threads=1, logits_all=True, verbose=False)
    llm.eval(prompt)
    last = np.array(llm.scores[len(prompt) - 1], dtype=np.float32)
    ids = []
    for _ in range(n):
        row = llm.scores[llm.n_tokens - 1]
        ids.append(int(np.argmax(row)))
        final = np.array(row, dtype=np.float32)
        llm.eval([ids[-1]])
    as_list = lambda r: [float(v) for v in r]
    return ids, as_list(last), as_list(final), int(llm.n_ctx())


def write_json(path, refs):
    with open(path, "w") as f:
        json.dump(refs, f, separators=(",", ":"))
        f.write("\n")


def fresh_dir(path):
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def make_moe():
    goldens = json.load(open(ENGINE / "moe.json"))
    out = fresh_dir(ENGINE / "moe-gguf")
    refs = {}
    for name, kw in moe.FAMILIES.items():
        with tempfile.TemporaryDirectory() as tmp:
            src = ENGINE / name
            hf_ids, hf_last = goldens[name]["ids"], goldens[name]["prompt_logits"][-1]
            if name in ("qwen2_moe", "qwen3_moe"):  # every layer sparse, as llama.cpp's graph
                model, ref = sparse_variant(name, dict(kw, mlp_only_layers=[]))
                hf_ids, hf_last = ref["ids"], ref["prompt_logits"][-1]
                src = Path(tmp) / name
                model.save_pretrained(src, safe_serialization=True)
            dst = out / f"{name}.gguf"
            convert(src, dst)
        prompt = goldens[name]["prompt"]  # reference() draws it from the name: the variants' too
        ids, logits, _, _ = llama_cpp_greedy(dst, prompt, fam.NEW_TOKENS)
        refs[name] = {"arch": MOE_ARCH[name], "prompt": prompt, "ids": ids, "last_prompt_logits": logits,
                      "transformers_ids": hf_ids, "transformers_last_prompt_logits": hf_last, "sparse_variant": name in ("qwen2_moe", "qwen3_moe")}
        print(name, ids[:8], "llama.cpp == transformers" if ids == hf_ids else "llama.cpp != transformers")
    write_json(ENGINE / "moe-gguf.json", refs)


DEEPSEEK_GGUF = {  # name -> the make_engine_deepseek.py model it varies, and the changes
    "deepseek_v3": ("deepseek_v3", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "deepseek_v2_lite": ("deepseek_v2_lite", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # yarn as DeepSeek-V2-Lite's config has it (mscale = mscale_all_dim: llama.cpp's assumption)
    "deepseek_v2_lite_yarn": ("deepseek_v2_lite", {}),
}


def make_deepseek():
    """A seed is kept when, besides make_engine_deepseek.py's conditions, llama.cpp's 32 ids
    equal transformers' (its exp/SiLU approximations can flip a close step of the path)."""
    out = fresh_dir(ENGINE / "deepseek-gguf")
    refs = {}
    for name, (base, changes) in DEEPSEEK_GGUF.items():
        kw = dict(ds.FAMILIES[base], **changes)
        dst = out / f"{name}.gguf"
        for attempt in range(80):
            model = ds.make(name, kw, attempt)
            ref = fam.reference(name, model, model.config.vocab_size)
            gap = ds.routing_gap(model, ref["prompt"] + ref["ids"])
            if len(set(ref["ids"])) < 6 or ref["min_greedy_margin"] <= 1e-3 or gap <= 1e-3:
                continue
            if model.config.model_type == "deepseek_v3":
                model.config.scoring_func = "sigmoid"  # as the Hub's config.json says
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / name
                model.save_pretrained(src, safe_serialization=True)
                convert(src, dst)
            ids, logits, _, _ = llama_cpp_greedy(dst, ref["prompt"], fam.NEW_TOKENS)
            if ids == ref["ids"]:
                break
            print(name, "attempt", attempt, ": llama.cpp's path departs from transformers'")
        else:
            raise SystemExit(f"{name}: no seed gives a varied greedy path, clear routing and llama.cpp's ids")
        refs[name] = {"arch": "deepseek2", "prompt": ref["prompt"], "ids": ids, "last_prompt_logits": logits,
                      "transformers_ids": ref["ids"], "transformers_last_prompt_logits": ref["prompt_logits"][-1],
                      "seed_attempt": attempt, "min_routing_gap": gap}
        print(name, ids[:8], "attempt", attempt)
    write_json(ENGINE / "deepseek-gguf.json", refs)


def as_llama_cpp_reads(cfg, n_ctx):
    """Config changes that make transformers compute what llama.cpp computes from the
    converted file at context n_ctx, where the two read the model differently."""
    changes = {}
    if cfg.model_type in ("gemma2", "gemma3_text") and cfg.query_pre_attn_scalar != cfg.head_dim:
        # llama.cpp (src/models/gemma2.cpp, gemma3.cpp) scales q by 1/sqrt(head_dim) but for the
        # 27B layer counts; the GGUF has no query_pre_attn_scalar.
        changes["query_pre_attn_scalar"] = cfg.head_dim
    rp = getattr(cfg, "rope_parameters", None) or {}
    if rp.get("rope_type") == "longrope" and n_ctx > rp["original_max_position_embeddings"]:
        # llama.cpp takes the long factors for every position when its context (padded to
        # 256) exceeds the original one; transformers only past that length.
        changes["rope_parameters"] = dict(rp, short_factor=rp["long_factor"])
    return changes


def transformers_reference(name, src, changes):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.from_pretrained(src)
    for k, v in changes.items():
        setattr(cfg, k, v)
    model = AutoModelForCausalLM.from_pretrained(src, config=cfg, attn_implementation="eager", dtype=torch.float32).eval()
    return fam.reference(name, model, cfg.vocab_size)


def relative(a, b):
    a, b = np.array(a), np.array(b)
    return float(np.abs(a - b).max() / np.abs(b).max())


def make_dense():
    from transformers import AutoConfig
    out = fresh_dir(ENGINE / "dense-gguf")
    refs = {}
    for name, (src, arch) in DENSE.items():
        dst = out / f"{name}.gguf"
        convert(src, dst, model_name="tiny random fixture")  # llama.cpp keys vocab fix-ups to names ("phi3")
        plain = transformers_reference(name, src, {})
        ids, last, final, ctx = llama_cpp_greedy(dst, plain["prompt"], fam.NEW_TOKENS)
        changes = as_llama_cpp_reads(AutoConfig.from_pretrained(src), ctx)
        hf = transformers_reference(name, src, changes) if changes else plain
        refs[name] = {"file": f"{name}.gguf", "arch": arch, "n_ctx": ctx, "prompt": plain["prompt"], "ids": ids,
                      "last_prompt_logits": last, "final_logits": final,
                      "transformers": {"config_changes": changes, "ids": hf["ids"],
                                       "last_prompt_logits": hf["prompt_logits"][-1], "final_logits": hf["final_logits"]},
                      "transformers_unchanged_ids": plain["ids"]}
        same = lambda a: sum(x == y for x, y in zip(ids, a))
        print(f"{name}: n_ctx {ctx}; llama.cpp vs transformers as committed: {same(plain['ids'])}/32 ids, last prompt "
              f"logits {relative(last, plain['prompt_logits'][-1]):.2e}; vs transformers with {changes or 'no changes'}: "
              f"{same(hf['ids'])}/32 ids, {relative(last, hf['prompt_logits'][-1]):.2e}, final "
              f"{relative(final, hf['final_logits']):.2e}")
    write_json(ENGINE / "dense-gguf.json", refs)


def clamp_hits(model, prompt_ids):
    """How many gate values of the prompt's routed experts reach the clamp (gate_up before the activation)."""
    import torch
    hits = [0]

    def hook(mod, args, _out):
        lim = model.config.swiglu_limit
        x = args[0]
        gu = torch.einsum("th,ehk->etk", x.reshape(-1, x.shape[-1]), mod.gate_up_proj) + mod.gate_up_proj_bias[:, None, :]
        hits[0] += int((gu[..., ::2] > lim).sum())

    hooks = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.experts")]
    with torch.no_grad():
        model(torch.tensor([prompt_ids]))
    for h in hooks:
        h.remove()
    return hits[0]


def make_gpt_oss():
    """gpt-oss as llama.cpp runs it: the clamped SwiGLU at its fixed alpha 1.702 and limit 7
    (LLM_FFN_SWIGLU_OAI_MOE), yarn with the correction range floored/ceiled (ggml has no
    truncate=false); experts as MXFP4 (the published checkpoints' store), repacked by the
    converter into ggml's MXFP4 blocks (scale byte, then 16 bytes: value j low nibble, j + 16
    high). transformers runs the same model (its dequantized experts) for the exact golden."""
    import make_engine_gpt_oss as oss
    import torch
    cfg = dict(oss.CONFIG, swiglu_alpha=1.702, swiglu_limit=7.0,
               rope_parameters=dict(oss.CONFIG["rope_parameters"], truncate=True))
    for attempt in range(80):
        tensors, qmodel = oss.mxfp4_model(oss.make_model(attempt, cfg, expert_scale=3.0))
        ref = fam.reference("gpt_oss", qmodel, qmodel.config.vocab_size)
        seq = ref["prompt"] + ref["ids"]
        gap = oss.routing_gap(qmodel, seq)
        hits = clamp_hits(qmodel, seq)
        if len(set(ref["ids"])) >= 6 and ref["min_greedy_margin"] > 5e-3 and gap > 1e-3 and hits > 0:
            break
    else:
        raise SystemExit("gpt_oss GGUF: no seed gives a varied greedy path with clear routing and a hit clamp")
    # The exact greedy path: each id the argmax of a fresh forward over everything before it.
    # transformers 5.25's cached generate departs from its own forward on this model (at the
    # 27th id: its forward gives 2 over 49 by 0.26, generate picks 49), so generate's ids are
    # kept beside, not used as the expectation.
    seq = list(ref["prompt"])
    with torch.no_grad():
        for _ in range(fam.NEW_TOKENS):
            seq.append(int(qmodel(torch.tensor([seq])).logits[0, -1].argmax()))
    forward_ids = seq[len(ref["prompt"]):]
    with torch.no_grad():  # the last position before the 32nd id, on that path
        forward_final = [float(v) for v in qmodel(torch.tensor([seq[:-1]])).logits[0, -1].float()]
    out = fresh_dir(ENGINE / "gpt_oss-gguf")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "gpt_oss_mxfp4"
        qmodel.config.architectures = ["GptOssForCausalLM"]  # what save_pretrained would set
        oss.write_mxfp4(src, tensors, qmodel.config)
        dst = out / "gpt_oss.gguf"
        convert(src, dst, model_name="tiny random fixture")
    ids, last, final, ctx = llama_cpp_greedy(dst, ref["prompt"], fam.NEW_TOKENS)
    same = sum(x == y for x, y in zip(ids, forward_ids))
    print(f"gpt_oss: seed attempt {attempt}, clamp hits {hits}, routing gap {gap:.3g}; generate vs forward "
          f"{sum(x == y for x, y in zip(ref['ids'], forward_ids))}/32 ids; llama.cpp vs transformers' forward "
          f"{same}/32 ids, last prompt logits {relative(last, ref['prompt_logits'][-1]):.2e}, final {relative(final, forward_final):.2e}")
    refs = {"gpt_oss": {"file": "gpt_oss.gguf", "arch": "gpt-oss", "n_ctx": ctx, "prompt": ref["prompt"], "ids": ids,
                        "last_prompt_logits": last, "final_logits": final,
                        "transformers": {"ids": forward_ids, "generate_ids": ref["ids"], "prompt_logits": ref["prompt_logits"],
                                         "final_logits": forward_final, "min_greedy_margin": ref["min_greedy_margin"],
                                         "min_routing_gap": gap, "clamp_hits": hits, "seed_attempt": attempt,
                                         "config": {k: cfg[k] for k in ("swiglu_alpha", "swiglu_limit", "rope_parameters")}}}}
    write_json(ENGINE / "gpt_oss-gguf.json", refs)


def make_llama4():
    """A Llama 4 twin with llama.cpp's fixed constants (chunk 8192, floor_scale 8192, attn_scale
    0.1, a NoPE layer every 4: its converter writes none of them) and the default rope; the
    first seed whose llama.cpp greedy ids equal transformers'."""
    import make_engine_llama4 as l4
    config = dict(l4.CONFIG, attention_chunk_size=8192, floor_scale=8192, attn_scale=0.1,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    out = fresh_dir(ENGINE / "llama4-gguf")
    dst = out / "llama4.gguf"
    for attempt in range(40):
        model = fam.make_model("llama4", config, attempt).eval()
        ref = fam.reference("llama4", model, model.config.vocab_size)
        gap = l4.routing_gap(model, ref["prompt"] + ref["ids"])
        if len(set(ref["ids"])) < 10 or ref["min_greedy_margin"] <= 3e-3 or gap <= 1e-3:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "llama4"
            model.save_pretrained(src, safe_serialization=True)
            convert(src, dst)
        ids, last, _, ctx = llama_cpp_greedy(dst, ref["prompt"], fam.NEW_TOKENS)
        if ids == ref["ids"]:
            break
        print("attempt", attempt, ": llama.cpp's ids depart from transformers'; next seed")
    else:
        raise SystemExit("llama4: no seed where llama.cpp agrees with transformers")
    refs = {"llama4": {"file": "llama4.gguf", "arch": "llama4", "n_ctx": ctx, "prompt": ref["prompt"], "ids": ids,
                       "last_prompt_logits": last, "seed_attempt": attempt, "min_routing_gap": gap,
                       "transformers": {k: ref[k] for k in ("ids", "prompt_logits", "final_logits", "min_greedy_margin")}}}
    print("llama4", ids[:8], "margin", ref["min_greedy_margin"], "routing gap", gap)
    write_json(ENGINE / "llama4-gguf.json", refs)


SETS = {"moe": make_moe, "dense": make_dense, "gpt_oss": make_gpt_oss, "deepseek": make_deepseek, "llama4": make_llama4}


def main():
    sets = sys.argv[1:] or list(SETS)
    for s in sets:
        if s not in SETS:
            raise SystemExit(f"unknown set {s!r} ({', '.join(SETS)})")
    for s in sets:
        SETS[s]()


if __name__ == "__main__":
    sys.path[:0] = [os.path.join(LLAMA_CPP, "gguf-py"), LLAMA_CPP]
    main()
