#!/usr/bin/env python3
"""Header-only fixtures of whole diffusers pipelines: testdata/pipeline/<case>/ holds the
published model_index.json, each component's published config.json and tensors.json (the
tensors as diffusers / transformers name them in the component's saved file), and
expected.json with what diffusers and transformers say (sum(p.numel()) per component of the
meta-device model, the classes). tests/test_pipeline.cpp writes each component as a sparse
safetensors file and holds nunchaku's pipeline estimate to it.

  python3 scripts/make_pipeline_fixtures.py     (torch, transformers 5, diffusers)
"""
import json
import os
import sys

import diffusers
import torch
import transformers

OUT = os.path.join(os.path.dirname(__file__), "..", "testdata", "pipeline")
DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}

# black-forest-labs/FLUX.1-dev: model_index.json and each component's config.json as published
FLUX_DEV = {
    "model_index": {
        "_class_name": "FluxPipeline", "_diffusers_version": "0.30.0.dev0",
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"], "text_encoder_2": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "tokenizer_2": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "FluxTransformer2DModel"], "vae": ["diffusers", "AutoencoderKL"]},
    "components": {
        "text_encoder": ("transformers", "CLIPTextModel", "model.safetensors", dict(
            architectures=["CLIPTextModel"], hidden_act="quick_gelu", hidden_size=768, intermediate_size=3072,
            layer_norm_eps=1e-05, max_position_embeddings=77, model_type="clip_text_model", num_attention_heads=12,
            num_hidden_layers=12, projection_dim=768, torch_dtype="bfloat16", vocab_size=49408)),
        "text_encoder_2": ("transformers", "T5EncoderModel", "model.safetensors", dict(
            architectures=["T5EncoderModel"], d_ff=10240, d_kv=64, d_model=4096, dense_act_fn="gelu_new",
            feed_forward_proj="gated-gelu", is_encoder_decoder=True, is_gated_act=True, layer_norm_epsilon=1e-06,
            model_type="t5", num_decoder_layers=24, num_heads=64, num_layers=24, relative_attention_max_distance=128,
            relative_attention_num_buckets=32, tie_word_embeddings=False, torch_dtype="bfloat16", vocab_size=32128)),
        "transformer": ("diffusers", "FluxTransformer2DModel", "diffusion_pytorch_model.safetensors", dict(
            _class_name="FluxTransformer2DModel", attention_head_dim=128, guidance_embeds=True, in_channels=64,
            joint_attention_dim=4096, num_attention_heads=24, num_layers=19, num_single_layers=38, patch_size=1,
            pooled_projection_dim=768, torch_dtype="bfloat16")),
        "vae": ("diffusers", "AutoencoderKL", "diffusion_pytorch_model.safetensors", dict(
            _class_name="AutoencoderKL", act_fn="silu", block_out_channels=[128, 256, 512, 512],
            down_block_types=["DownEncoderBlock2D"] * 4, force_upcast=True, in_channels=3, latent_channels=16,
            layers_per_block=2, mid_block_add_attention=True, norm_num_groups=32, out_channels=3, sample_size=1024,
            scaling_factor=0.3611, shift_factor=0.1159, up_block_types=["UpDecoderBlock2D"] * 4,
            use_post_quant_conv=False, use_quant_conv=False, torch_dtype="bfloat16")),
    },
}
CASES = {"flux-dev": FLUX_DEV}


def build(library, cls_name, cfg):
    dtype = getattr(torch, cfg["torch_dtype"])
    if library == "diffusers":
        cls = getattr(diffusers, cls_name)
        kw = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "torch_dtype"}
        with torch.device("meta"):
            return cls(**kw).to(dtype)
    conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
    with torch.device("meta"):
        return getattr(transformers, cls_name)(conf).to(dtype)


def make(case):
    spec = CASES[case]
    root = os.path.join(OUT, case)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "model_index.json"), "w") as f:
        json.dump(spec["model_index"], f, indent=1)
        f.write("\n")
    expected = {"case": case, "pipeline": spec["model_index"]["_class_name"], "diffusers": diffusers.__version__,
                "transformers": transformers.__version__, "torch": torch.__version__, "components": {}}
    for name, (library, cls_name, weights_file, cfg) in spec["components"].items():
        model = build(library, cls_name, cfg)
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        conf = dict(cfg)
        if library == "diffusers":
            conf["_diffusers_version"] = diffusers.__version__
        else:
            conf["transformers_version"] = transformers.__version__
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(conf, f, indent=1, sort_keys=True)
            f.write("\n")
        seen, tensors, nbytes = set(), [], 0
        for tname, p in model.state_dict(keep_vars=True).items():
            if id(p) in seen:  # tied: save_pretrained writes one name
                continue
            seen.add(id(p))
            tensors.append([tname, DT[p.dtype], list(p.shape)])
            nbytes += p.numel() * p.element_size()
        with open(os.path.join(d, "tensors.json"), "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(x) for x in tensors) + "\n]\n")
        params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        expected["components"][name] = dict(library=library, class_name=cls_name, weights_file=weights_file,
                                            num_parameters=params, weight_bytes=nbytes, num_tensors=len(tensors))
        print(f"{case}/{name}: {cls_name}, {params} parameters, {nbytes} bytes, {len(tensors)} tensors")
    with open(os.path.join(root, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    for c in sys.argv[1:] or list(CASES):
        make(c)
