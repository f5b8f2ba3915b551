#!/usr/bin/env python3
"""testdata/arch/<case>/: header-only fixtures of published model configurations, made from
transformers' own meta-device models (no weights are materialised).

For every case this writes
  config.json    the published config.json's fields (sparse, as on the Hub: class defaults
                 are NOT filled in, so the reader must know them)
  tensors.json   [[name, dtype, shape], ...] exactly as the model's state_dict names them
                 (transformers 5), tied duplicates dropped as save_pretrained drops them;
                 quantized stores (MXFP4, FP8 block scales) rewritten as the published
                 checkpoints store them; a "#" in a name expands to experts 0..E-1 (fp8 DeepSeek)
  expected.json  what transformers says: num_parameters = sum(p.numel()) of the model,
                 num_active_parameters (routed experts counted top_k / E), the decoder layers
                 and, per layer, its attention kind and KV elements per token (K + V, or the MLA
                 latent), or the recurrent state elements per sequence, from the family's
                 reference implementation (formulas in docs/architectures.md)

    /work/venv/bin/python scripts/make_arch_fixtures.py [case ...]
Needs torch and transformers (5.x; the version used is written into expected.json), and
diffusers for the flux-dev case.
"""
import json
import math
import os
import sys

import torch
import transformers
from transformers import AutoConfig

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "arch")

DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def llama3_8b():
    return "LlamaForCausalLM", dict(
        model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16",
        hidden_act="silu", bos_token_id=128000, eos_token_id=128001)


def llama2_7b():
    return "LlamaForCausalLM", dict(
        model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096,
        rms_norm_eps=1e-5, torch_dtype="float16", hidden_act="silu")


def mistral_7b():
    return "MistralForCausalLM", dict(
        model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
        sliding_window=4096, rope_theta=10000.0, rms_norm_eps=1e-5, torch_dtype="bfloat16")


def mistral_nemo():
    return "MistralForCausalLM", dict(
        model_type="mistral", hidden_size=5120, intermediate_size=14336, num_hidden_layers=40,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=131072,
        max_position_embeddings=1024000, rope_theta=1000000.0, sliding_window=None, rms_norm_eps=1e-5,
        torch_dtype="bfloat16")


def mixtral_8x7b():
    return "MixtralForCausalLM", dict(
        model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
        num_local_experts=8, num_experts_per_tok=2, rope_theta=1000000.0, sliding_window=None,
        rms_norm_eps=1e-5, torch_dtype="bfloat16")


def qwen2_7b():
    return "Qwen2ForCausalLM", dict(
        model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, max_position_embeddings=131072,
        rope_theta=1000000.0, use_sliding_window=False, sliding_window=131072, max_window_layers=28,
        rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="bfloat16")


def qwen2_moe():
    return "Qwen2MoeForCausalLM", dict(
        model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632, num_experts=60, num_experts_per_tok=4, num_hidden_layers=24,
        num_attention_heads=16, num_key_value_heads=16, vocab_size=151936, max_position_embeddings=8192,
        decoder_sparse_step=1, rope_theta=1000000.0, use_sliding_window=False, sliding_window=32768,
        max_window_layers=21, rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="bfloat16")


def qwen3_8b():
    return "Qwen3ForCausalLM", dict(
        model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        max_position_embeddings=40960, rope_theta=1000000.0, use_sliding_window=False, sliding_window=None,
        max_window_layers=36, rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="bfloat16")


def qwen3_30b_a3b():
    return "Qwen3MoeForCausalLM", dict(
        model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, decoder_sparse_step=1, mlp_only_layers=[],
        norm_topk_prob=True, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
        use_sliding_window=False, sliding_window=None, max_window_layers=48, rms_norm_eps=1e-6,
        tie_word_embeddings=False, torch_dtype="bfloat16")


def jamba():
    return "JambaForCausalLM", dict(
        model_type="jamba", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=65536, max_position_embeddings=262144,
        attn_layer_period=8, attn_layer_offset=4, expert_layer_period=2, expert_layer_offset=1,
        num_experts=16, num_experts_per_tok=2, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
        mamba_dt_rank=256, mamba_conv_bias=True, mamba_proj_bias=False, use_mamba_kernels=False,
        tie_word_embeddings=False, torch_dtype="bfloat16")


def gemma_7b():
    return "GemmaForCausalLM", dict(
        model_type="gemma", hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=16, head_dim=256, vocab_size=256000,
        max_position_embeddings=8192, rope_theta=10000.0, rms_norm_eps=1e-6, hidden_act="gelu",
        torch_dtype="bfloat16")


def gemma2_9b():
    return "Gemma2ForCausalLM", dict(
        model_type="gemma2", hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
        num_attention_heads=16, num_key_value_heads=8, head_dim=256, vocab_size=256000,
        max_position_embeddings=8192, sliding_window=4096, query_pre_attn_scalar=256,
        attn_logit_softcapping=50.0, final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh",
        torch_dtype="float32")


def gemma3_1b():
    # google/gemma-3-1b-it: a text-only Gemma3ForCausalLM.
    return "Gemma3ForCausalLM", dict(
        model_type="gemma3_text", hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
        num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
        max_position_embeddings=32768, rope_theta=1000000.0, rope_local_base_freq=10000,
        sliding_window=512, sliding_window_pattern=6, query_pre_attn_scalar=256, rope_scaling=None,
        torch_dtype="bfloat16")


def gemma3_12b():
    # google/gemma-3-12b-it: the Hub config is sparse; head_dim, rope_theta, the layer
    # pattern and the context come from Gemma3TextConfig's class defaults.
    return "Gemma3ForConditionalGeneration", dict(
        model_type="gemma3", architectures=["Gemma3ForConditionalGeneration"], mm_tokens_per_image=256,
        boi_token_index=255999, eoi_token_index=256000, image_token_index=262144, torch_dtype="bfloat16",
        text_config=dict(model_type="gemma3_text", hidden_size=3840, intermediate_size=15360,
                         num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=8,
                         rope_scaling=dict(factor=8.0, rope_type="linear"), sliding_window=1024),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, image_size=896,
                           intermediate_size=4304, num_attention_heads=16, num_hidden_layers=27,
                           patch_size=14, vision_use_head=False))


def phi3_mini():
    return "Phi3ForCausalLM", dict(
        model_type="phi3", hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=32064, max_position_embeddings=4096,
        original_max_position_embeddings=4096, sliding_window=2047, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, torch_dtype="bfloat16")


def phi4():
    return "Phi3ForCausalLM", dict(
        model_type="phi3", hidden_size=5120, intermediate_size=17920, num_hidden_layers=40,
        num_attention_heads=40, num_key_value_heads=10, vocab_size=100352, max_position_embeddings=16384,
        original_max_position_embeddings=16384, rope_theta=250000.0, sliding_window=None, rms_norm_eps=1e-5,
        tie_word_embeddings=False, torch_dtype="bfloat16")


def deepseek_v2_lite():
    return "DeepseekV2ForCausalLM", dict(
        model_type="deepseek_v2", hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16, kv_lora_rank=512,
        q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=64,
        n_shared_experts=2, num_experts_per_tok=6, first_k_dense_replace=1, moe_layer_freq=1,
        n_group=1, topk_group=1, topk_method="greedy", vocab_size=102400, max_position_embeddings=163840,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="bfloat16")


def deepseek_v3():
    return "DeepseekV3ForCausalLM", dict(
        model_type="deepseek_v3", hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, q_lora_rank=1536,
        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=256,
        n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=3, moe_layer_freq=1, n_group=8,
        topk_group=4, routed_scaling_factor=2.5, num_nextn_predict_layers=1, vocab_size=129280,
        max_position_embeddings=163840, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
        torch_dtype="bfloat16")


def gpt_oss_20b():
    return "GptOssForCausalLM", dict(
        model_type="gpt_oss", hidden_size=2880, intermediate_size=2880, num_hidden_layers=24,
        num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=32,
        num_experts_per_tok=4, experts_per_token=4, vocab_size=201088, sliding_window=128,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)],
        max_position_embeddings=131072, rope_theta=150000.0, initial_context_length=4096,
        rope_scaling=dict(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                          original_max_position_embeddings=4096),
        attention_bias=True, tie_word_embeddings=False, torch_dtype="bfloat16")


def llama4_scout():
    return "Llama4ForConditionalGeneration", dict(
        model_type="llama4", architectures=["Llama4ForConditionalGeneration"], image_token_index=200092,
        torch_dtype="bfloat16",
        text_config=dict(model_type="llama4_text", hidden_size=5120, intermediate_size=8192,
                         intermediate_size_mlp=16384, num_hidden_layers=48, num_attention_heads=40,
                         num_key_value_heads=8, head_dim=128, num_local_experts=16, num_experts_per_tok=1,
                         interleave_moe_layer_step=1, attention_chunk_size=8192, vocab_size=202048,
                         max_position_embeddings=10485760, rope_theta=500000.0, use_qk_norm=True,
                         no_rope_layers=[0 if (i + 1) % 4 == 0 else 1 for i in range(48)],
                         rope_scaling=dict(factor=16.0, high_freq_factor=1.0, low_freq_factor=1.0,
                                           original_max_position_embeddings=8192, rope_type="llama3")),
        vision_config=dict(model_type="llama4_vision_model", hidden_size=1408, intermediate_size=5632,
                           num_hidden_layers=34, num_attention_heads=16, image_size=336, patch_size=14,
                           vision_output_dim=4096, projector_input_dim=4096, projector_output_dim=4096,
                           pixel_shuffle_ratio=0.5))


def olmo2_7b():
    return "Olmo2ForCausalLM", dict(
        model_type="olmo2", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, vocab_size=100352, max_position_embeddings=4096,
        rope_theta=500000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="float32")


def olmoe():
    return "OlmoeForCausalLM", dict(
        model_type="olmoe", hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
        vocab_size=50304, max_position_embeddings=4096, rope_theta=10000.0, clip_qkv=None,
        tie_word_embeddings=False, torch_dtype="bfloat16")


def llava15_7b():
    # llava-hf/llava-1.5-7b-hf: text_config names only what differs from LlamaConfig's defaults.
    return "LlavaForConditionalGeneration", dict(
        model_type="llava", architectures=["LlavaForConditionalGeneration"], image_token_index=32000,
        projector_hidden_act="gelu", vision_feature_layer=-2, vision_feature_select_strategy="default",
        image_seq_length=576, torch_dtype="float16",
        text_config=dict(model_type="llama", architectures=["LlamaForCausalLM"], max_position_embeddings=4096,
                         rms_norm_eps=1e-5, torch_dtype="float16", vocab_size=32064),
        vision_config=dict(model_type="clip_vision_model", hidden_size=1024, image_size=336,
                           intermediate_size=4096, num_attention_heads=16, num_hidden_layers=24, patch_size=14,
                           projection_dim=768, vocab_size=32000))


def qwen2_vl_7b():
    return "Qwen2VLForConditionalGeneration", dict(
        model_type="qwen2_vl", architectures=["Qwen2VLForConditionalGeneration"], hidden_size=3584,
        intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
        vocab_size=152064, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
        max_window_layers=28, use_sliding_window=False, sliding_window=32768, tie_word_embeddings=False,
        rope_scaling=dict(type="mrope", mrope_section=[16, 24, 24]), image_token_id=151655,
        video_token_id=151656, vision_start_token_id=151652, torch_dtype="bfloat16",
        vision_config=dict(depth=32, embed_dim=1280, mlp_ratio=4, num_heads=16, in_chans=3, hidden_size=3584,
                           patch_size=14, spatial_merge_size=2, spatial_patch_size=14, temporal_patch_size=2))


def qwen25_vl_7b():
    return "Qwen2_5_VLForConditionalGeneration", dict(
        model_type="qwen2_5_vl", architectures=["Qwen2_5_VLForConditionalGeneration"], hidden_size=3584,
        intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
        vocab_size=152064, max_position_embeddings=128000, rope_theta=1000000.0, rms_norm_eps=1e-6,
        max_window_layers=28, use_sliding_window=False, sliding_window=32768, tie_word_embeddings=False,
        rope_scaling=dict(type="mrope", mrope_section=[16, 24, 24]), image_token_id=151655,
        video_token_id=151656, torch_dtype="bfloat16",
        vision_config=dict(depth=32, hidden_act="silu", hidden_size=1280, intermediate_size=3420,
                           num_heads=16, in_chans=3, out_hidden_size=3584, patch_size=14, spatial_merge_size=2,
                           spatial_patch_size=14, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
                           tokens_per_second=2, temporal_patch_size=2))


def mistral3_24b():
    return "Mistral3ForConditionalGeneration", dict(
        model_type="mistral3", architectures=["Mistral3ForConditionalGeneration"], image_token_index=10,
        multimodal_projector_bias=False, projector_hidden_act="gelu", spatial_merge_size=2,
        vision_feature_layer=-1, torch_dtype="bfloat16",
        text_config=dict(model_type="mistral", hidden_size=5120, intermediate_size=32768, num_hidden_layers=40,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=131072,
                         max_position_embeddings=131072, rope_theta=1000000000.0, sliding_window=None,
                         rms_norm_eps=1e-5),
        vision_config=dict(model_type="pixtral", hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                           num_attention_heads=16, head_dim=64, image_size=1540, patch_size=14,
                           rope_theta=10000.0))


def t5_base():
    return "T5ForConditionalGeneration", dict(
        model_type="t5", d_model=768, d_ff=3072, d_kv=64, num_heads=12, num_layers=12, vocab_size=32128,
        relative_attention_num_buckets=32, feed_forward_proj="relu", tie_word_embeddings=True,
        is_encoder_decoder=True, n_positions=512, torch_dtype="float32")


def bert_base():
    return "BertModel", dict(
        model_type="bert", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, vocab_size=30522, max_position_embeddings=512, type_vocab_size=2,
        torch_dtype="float32")


def flux_dev():
    # black-forest-labs/FLUX.1-dev transformer/config.json (diffusers layout; needs diffusers)
    return "diffusers:FluxTransformer2DModel", dict(
        _class_name="FluxTransformer2DModel", attention_head_dim=128, guidance_embeds=True, in_channels=64,
        joint_attention_dim=4096, num_attention_heads=24, num_layers=19, num_single_layers=38, patch_size=1,
        pooled_projection_dim=768, torch_dtype="bfloat16")


CASES = {
    "llama3-8b": llama3_8b, "llama2-7b": llama2_7b, "mistral-7b": mistral_7b, "mistral-nemo": mistral_nemo,
    "mixtral-8x7b": mixtral_8x7b, "qwen2-7b": qwen2_7b, "qwen2-moe": qwen2_moe, "qwen3-8b": qwen3_8b,
    "qwen3-30b-a3b": qwen3_30b_a3b, "jamba": jamba, "gemma-7b": gemma_7b, "gemma2-9b": gemma2_9b,
    "gemma3-1b": gemma3_1b, "gemma3-12b": gemma3_12b, "phi3-mini": phi3_mini, "phi4": phi4,
    "deepseek-v2-lite": deepseek_v2_lite, "deepseek-v3": deepseek_v3, "gpt-oss-20b": gpt_oss_20b,
    "llama4-scout": llama4_scout, "olmo2-7b": olmo2_7b, "olmoe": olmoe, "llava-1.5-7b": llava15_7b,
    "qwen2-vl-7b": qwen2_vl_7b, "qwen2.5-vl-7b": qwen25_vl_7b, "mistral3-24b": mistral3_24b,
    "t5-base": t5_base, "bert-base": bert_base, "flux-dev": flux_dev,
}


def build(cls_name, cfg_dict):
    cfg_dict = dict(cfg_dict)
    if cls_name.startswith("diffusers:"):
        import diffusers
        cls = getattr(diffusers, cls_name.split(":", 1)[1])
        kw = {k: v for k, v in cfg_dict.items() if not k.startswith("_") and k != "torch_dtype"}
        with torch.device("meta"):
            model = cls(**kw)
        return None, model.to(getattr(torch, cfg_dict["torch_dtype"]))
    cfg = AutoConfig.for_model(**cfg_dict)
    cls = getattr(transformers, cls_name)
    with torch.device("meta"):
        model = cls(cfg)
    dtype = getattr(torch, cfg_dict.get("torch_dtype", "float32"))
    model = model.to(dtype)
    return cfg, model


def text_config(cfg):
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def is_routed(name):
    return (".experts." in name or name.endswith(".experts")) and "shared" not in name


def layer_kinds(cfg, cls_name):
    """Per decoder layer: attention kind, window/chunk, KV elements per token, state elements."""
    t = text_config(cfg)
    mt = t.model_type
    out = []
    if mt == "t5":
        return []
    if mt == "bert":
        return []
    n = t.num_hidden_layers
    types = getattr(t, "layer_types", None)
    kvh = getattr(t, "num_key_value_heads", None) or t.num_attention_heads
    hd = getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads
    for i in range(n):
        kind, window = "full", 0
        if mt in ("deepseek_v2", "deepseek_v3"):
            out.append(dict(kind="mla", window=0, kv_elems_per_token=t.kv_lora_rank + t.qk_rope_head_dim,
                            state_elems=0))
            continue
        if mt == "jamba":
            if i % t.attn_layer_period == t.attn_layer_offset:
                out.append(dict(kind="full", window=0, kv_elems_per_token=2 * kvh * hd, state_elems=0))
            else:
                d_inner = t.mamba_expand * t.hidden_size
                out.append(dict(kind="recurrent", window=0, kv_elems_per_token=0,
                                state_elems=d_inner * (t.mamba_d_conv - 1) + d_inner * t.mamba_d_state))
            continue
        if mt == "llama4_text":
            chunked = t.no_rope_layers[i] != 0
            out.append(dict(kind="chunked" if chunked else "full", window=t.attention_chunk_size if chunked else 0,
                            kv_elems_per_token=2 * kvh * hd, state_elems=0))
            continue
        if types is not None:
            if types[i] == "sliding_attention":
                kind, window = "sliding", t.sliding_window
        elif mt in ("mistral", "phi3") and getattr(t, "sliding_window", None):
            kind, window = "sliding", t.sliding_window
        out.append(dict(kind=kind, window=window, kv_elems_per_token=2 * kvh * hd, state_elems=0))
    return out


def fp8_store(name, dtype, shape, num_experts):
    """DeepSeek-V3's published FP8 checkpoint: per-expert Linear weights in F8_E4M3 with a
    [ceil(out/128), ceil(in/128)] F32 weight_scale_inv; embeddings, norms, router and head in BF16."""
    quantized = (name.startswith("model.layers.") and name.endswith("proj.weight")) or \
        name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj")
    if not quantized:
        return [[name, dtype, shape]]
    def pair(n, out_f, in_f):
        return [[n, "F8_E4M3", [out_f, in_f]],
                [n + "_scale_inv", "F32", [math.ceil(out_f / 128), math.ceil(in_f / 128)]]]
    if name.endswith("experts.gate_up_proj"):  # fused [E, 2I, H] -> per expert gate/up
        base = name[: -len("gate_up_proj")] + "#."
        e, two_i, h = shape
        return pair(base + "gate_proj.weight", two_i // 2, h) + pair(base + "up_proj.weight", two_i // 2, h)
    if name.endswith("experts.down_proj"):
        base = name[: -len("down_proj")] + "#."
        e, h, i = shape
        return pair(base + "down_proj.weight", h, i)
    return pair(name, shape[0], shape[1])


def mxfp4_store(name, dtype, shape):
    """gpt-oss's published MXFP4 experts: *_blocks U8 [E, out, in/32, 16] and *_scales U8
    [E, out, in/32] for gate_up_proj and down_proj, stored (out, in) as the original checkpoint."""
    if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
        e, a, b = shape  # transformers: gate_up_proj [E, H, 2I], down_proj [E, I, H] (in, out)
        in_f, out_f = a, b
        return [[name + "_blocks", "U8", [e, out_f, in_f // 32, 16]], [name + "_scales", "U8", [e, out_f, in_f // 32]]]
    return [[name, dtype, shape]]


def make(case):
    cls_name, cfg_dict = CASES[case]()
    cfg, model = build(cls_name, cfg_dict)
    seen = {}
    tensors = []
    for name, p in model.state_dict(keep_vars=True).items():
        key = id(p)
        if key in seen:  # tied: save_pretrained writes one name
            continue
        seen[key] = name
        tensors.append([name, DT[p.dtype], list(p.shape)])
    params = {id(p): p for p in model.parameters()}
    num_params = sum(p.numel() for p in params.values())
    t = text_config(cfg) if cfg is not None else object()
    top_k = getattr(t, "num_experts_per_tok", None) or getattr(t, "num_experts_per_token", 0) or 0
    n_exp = getattr(t, "num_local_experts", None) or getattr(t, "num_experts", None) or \
        getattr(t, "n_routed_experts", None) or 0
    routed = sum(p.numel() for n, p in model.named_parameters() if is_routed(n))
    active = num_params - routed + (routed * top_k // n_exp if n_exp else 0)
    kinds = layer_kinds(cfg, cls_name) if cfg is not None else []
    variants = [(case, tensors, cfg_dict)]
    if case == "deepseek-v3":
        fp8 = []
        for n, d, s in tensors:
            fp8 += fp8_store(n, d, s, n_exp)
        # the published checkpoint also holds the MTP layer 61 (not part of the transformers model)
        mtp = []
        for n, d, s in tensors:
            if n.startswith("model.layers.60."):
                mtp += fp8_store(n.replace("model.layers.60.", "model.layers.61."), d, s, n_exp)
        h, v = t.hidden_size, t.vocab_size
        mtp += [["model.layers.61.enorm.weight", "BF16", [h]], ["model.layers.61.hnorm.weight", "BF16", [h]],
                ["model.layers.61.eh_proj.weight", "BF16", [h, 2 * h]],
                ["model.layers.61.embed_tokens.weight", "BF16", [v, h]],
                ["model.layers.61.shared_head.norm.weight", "BF16", [h]],
                ["model.layers.61.shared_head.head.weight", "BF16", [v, h]]]
        fp8_cfg = dict(cfg_dict, quantization_config=dict(activation_scheme="dynamic", fmt="e4m3",
                                                          quant_method="fp8", weight_block_size=[128, 128]))
        variants.append(("deepseek-v3-fp8", fp8 + mtp, fp8_cfg))
    if case == "gpt-oss-20b":
        mx = []
        for n, d, s in tensors:
            mx += mxfp4_store(n, d, s)
        mx_cfg = dict(cfg_dict, quantization_config=dict(quant_method="mxfp4",
                                                         modules_to_not_convert=["model.layers.*.self_attn",
                                                                                 "model.layers.*.mlp.router",
                                                                                 "model.embed_tokens", "lm_head"]))
        variants.append(("gpt-oss-20b-mxfp4", mx, mx_cfg))
    for name, tens, cdict in variants:
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        conf = dict(cdict)
        if cfg is not None:
            conf.setdefault("architectures", [cls_name])
        if cfg is not None:
            conf["transformers_version"] = transformers.__version__
        else:
            import diffusers
            conf["_diffusers_version"] = diffusers.__version__
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(conf, f, indent=1, sort_keys=True)
            f.write("\n")
        with open(os.path.join(d, "tensors.json"), "w") as f:
            f.write("[\n" + ",\n".join(json.dumps(x) for x in tens) + "\n]\n")
        exp = dict(case=name, transformers=transformers.__version__, torch=torch.__version__,
                   hf_class=cls_name.replace("diffusers:", ""),
                   num_parameters=num_params, num_active_parameters=active if n_exp else num_params,
                   num_decoder_layers=len(kinds), layers=kinds, num_tensors_in_model=len(tensors))
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(exp, f, indent=1)
            f.write("\n")
        print(f"{name}: {num_params} parameters, {exp['num_active_parameters']} active, {len(tens)} tensors")


def main():
    cases = sys.argv[1:] or list(CASES)
    for c in cases:
        make(c)


if __name__ == "__main__":
    main()
