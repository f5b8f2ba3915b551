// The pieces of the per-family tensor tables (model/arch_table.hpp): tensor rules by part of
// a layer (attention, q/k norms, MLP, experts, ...) in both namings, the modules outside the
// layer stack, and the layer compositions the family records (src/model/arch/<family>.cpp,
// ArchRecord::tensors) put together into their table rows.
#pragma once

#include <span>
#include <string_view>

#include "model/arch_table.hpp"

namespace nunchaku::tensor_rules {

using R = TensorRule;
using Rules = std::span<const TensorRule>;
inline constexpr bool kOpt = true;
inline constexpr bool kReq = false;

// ---- Hugging Face naming (transformers modeling_*.py) ------------------------------------

// Llama-style attention; the biases appear with attention_bias=true (llama) and always in qwen2.
inline constexpr R kAttnHF[] = {
    {"input_layernorm.weight", "H", kReq, Role::AttnNorm},
    {"self_attn.q_proj.weight", "Q H", kReq, Role::Q},
    {"self_attn.k_proj.weight", "KV H", kReq, Role::K},
    {"self_attn.v_proj.weight", "KV H", kReq, Role::V},
    {"self_attn.o_proj.weight", "H Q", kReq, Role::O},
    {"self_attn.q_proj.bias", "Q", kOpt, Role::QBias},
    {"self_attn.k_proj.bias", "KV", kOpt, Role::KBias},
    {"self_attn.v_proj.bias", "KV", kOpt, Role::VBias},
    {"self_attn.o_proj.bias", "H", kOpt, Role::OBias},
    {"self_attn.rotary_emb.inv_freq", "*", kOpt},  // saved by transformers < 4.31
    {"post_attention_layernorm.weight", "H", kReq, Role::FfnNorm},
};
inline constexpr R kAttnBiasHF[] = {  // qwen2: q/k/v biases required
    {"self_attn.q_proj.bias", "Q", kReq, Role::QBias},
    {"self_attn.k_proj.bias", "KV", kReq, Role::KBias},
    {"self_attn.v_proj.bias", "KV", kReq, Role::VBias},
};
inline constexpr R kQkNormHF[] = {  // qwen3
    {"self_attn.q_norm.weight", "HD", kReq, Role::QNorm},
    {"self_attn.k_norm.weight", "HD", kReq, Role::KNorm},
};
// gemma2/3: input_layernorm before attention, post_attention_layernorm on its output (not
// the MLP's input norm as in llama), pre_/post_feedforward_layernorm around the MLP.
inline constexpr R kGemma2AttnHF[] = {
    {"input_layernorm.weight", "H", kReq, Role::AttnNorm},
    {"self_attn.q_proj.weight", "Q H", kReq, Role::Q},
    {"self_attn.k_proj.weight", "KV H", kReq, Role::K},
    {"self_attn.v_proj.weight", "KV H", kReq, Role::V},
    {"self_attn.o_proj.weight", "H Q", kReq, Role::O},
    {"post_attention_layernorm.weight", "H", kReq, Role::PostAttnNorm},
};
inline constexpr R kSandwichNormHF[] = {
    {"pre_feedforward_layernorm.weight", "H", kReq, Role::FfnNorm},
    {"post_feedforward_layernorm.weight", "H", kReq, Role::PostFfnNorm},
};
inline constexpr R kMlpHF[] = {
    {"mlp.gate_proj.weight", "I H", kReq, Role::Gate},
    {"mlp.up_proj.weight", "I H", kReq, Role::Up},
    {"mlp.down_proj.weight", "H I", kReq, Role::Down},
    {"mlp.gate_proj.bias", "I", kOpt, Role::GateBias},
    {"mlp.up_proj.bias", "I", kOpt, Role::UpBias},
    {"mlp.down_proj.bias", "H", kOpt, Role::DownBias},
};
inline constexpr R kMoeMixtralHF[] = {  // every Mixtral on the Hub; transformers 5 saves it so too
    {"block_sparse_moe.gate.weight", "E H", kReq, Role::Router},
    {"block_sparse_moe.experts.#.w1.weight", "EI H", kReq, Role::ExpGate},
    {"block_sparse_moe.experts.#.w2.weight", "H EI", kReq, Role::ExpDown},
    {"block_sparse_moe.experts.#.w3.weight", "EI H", kReq, Role::ExpUp},
};
inline constexpr R kMoeFusedHF[] = {  // transformers 5 in memory (experts fused per layer)
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.experts.gate_up_proj", "E 2EI H", kReq, Role::ExpGateUp},
    {"mlp.experts.down_proj", "E H EI", kReq, Role::ExpDown},
};
// Qwen2-MoE, Qwen3-MoE, OLMoE as transformers 5 saves them: the router, one tensor per
// expert; qwen2_moe adds a shared expert behind a sigmoid gate.
inline constexpr R kMoeExpertsHF[] = {
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.experts.#.gate_proj.weight", "EI H", kReq, Role::ExpGate},
    {"mlp.experts.#.up_proj.weight", "EI H", kReq, Role::ExpUp},
    {"mlp.experts.#.down_proj.weight", "H EI", kReq, Role::ExpDown},
};
inline constexpr R kMoeSharedHF[] = {
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.experts.#.gate_proj.weight", "EI H", kReq, Role::ExpGate},
    {"mlp.experts.#.up_proj.weight", "EI H", kReq, Role::ExpUp},
    {"mlp.experts.#.down_proj.weight", "H EI", kReq, Role::ExpDown},
    {"mlp.shared_expert.gate_proj.weight", "SI H", kReq, Role::ShGate},
    {"mlp.shared_expert.up_proj.weight", "SI H", kReq, Role::ShUp},
    {"mlp.shared_expert.down_proj.weight", "H SI", kReq, Role::ShDown},
    {"mlp.shared_expert_gate.weight", "1 H", kReq, Role::ShExpGate},
};
inline constexpr R kMoeSharedFusedHF[] = {  // qwen2_moe as transformers 5 holds it in memory
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.experts.gate_up_proj", "E 2EI H", kReq, Role::ExpGateUp},
    {"mlp.experts.down_proj", "E H EI", kReq, Role::ExpDown},
    {"mlp.shared_expert.gate_proj.weight", "SI H", kReq, Role::ShGate},
    {"mlp.shared_expert.up_proj.weight", "SI H", kReq, Role::ShUp},
    {"mlp.shared_expert.down_proj.weight", "H SI", kReq, Role::ShDown},
    {"mlp.shared_expert_gate.weight", "1 H", kReq, Role::ShExpGate},
};
inline constexpr R kQkNormFullHF[] = {  // olmoe: one norm over all of q (and of k), not per head
    {"self_attn.q_norm.weight", "Q", kReq, Role::QNorm},
    {"self_attn.k_norm.weight", "KV", kReq, Role::KNorm},
};
// gpt-oss (transformers' modeling_gpt_oss.py): llama attention with biases and one sink
// logit per head; the router is a linear with bias; experts' gate|up interleaved in one
// stacked tensor, input-major [E, H, 2I] in bf16/fp32 files, or MXFP4 (*_blocks [E, rows,
// cols/32, 16] + *_scales [E, rows, cols/32], output-major) as OpenAI ships them.
inline constexpr R kGptOssAttnHF[] = {
    {"input_layernorm.weight", "H", kReq, Role::AttnNorm},
    {"self_attn.q_proj.weight", "Q H", kReq, Role::Q},
    {"self_attn.k_proj.weight", "KV H", kReq, Role::K},
    {"self_attn.v_proj.weight", "KV H", kReq, Role::V},
    {"self_attn.o_proj.weight", "H Q", kReq, Role::O},
    {"self_attn.q_proj.bias", "Q", kOpt, Role::QBias},
    {"self_attn.k_proj.bias", "KV", kOpt, Role::KBias},
    {"self_attn.v_proj.bias", "KV", kOpt, Role::VBias},
    {"self_attn.o_proj.bias", "H", kOpt, Role::OBias},
    {"self_attn.sinks", "*", kReq, Role::Sinks},  // [heads] (bind checks it)
    {"post_attention_layernorm.weight", "H", kReq, Role::FfnNorm},
};
inline constexpr R kGptOssMoeHF[] = {
    {"mlp.router.weight", "E H", kReq, Role::Router},
    {"mlp.router.bias", "E", kReq, Role::RouterBias},
    {"mlp.experts.gate_up_proj", "E H 2EI", kReq, Role::ExpGateUpMixed},
    {"mlp.experts.gate_up_proj_bias", "E 2EI", kReq, Role::ExpGateUpBias},
    {"mlp.experts.down_proj", "E EI H", kReq, Role::ExpDown},
    {"mlp.experts.down_proj_bias", "E H", kReq, Role::ExpDownBias},
};
inline constexpr R kGptOssMoeMxfp4HF[] = {
    {"mlp.router.weight", "E H", kReq, Role::Router},
    {"mlp.router.bias", "E", kReq, Role::RouterBias},
    {"mlp.experts.gate_up_proj_blocks", "E 2EI * *", kReq, Role::ExpGateUpMixed},
    {"mlp.experts.gate_up_proj_scales", "E 2EI *", kReq, Role::ExpGateUpScales},
    {"mlp.experts.gate_up_proj_bias", "E 2EI", kReq, Role::ExpGateUpBias},
    {"mlp.experts.down_proj_blocks", "E H * *", kReq, Role::ExpDown},
    {"mlp.experts.down_proj_scales", "E H *", kReq, Role::ExpDownScales},
    {"mlp.experts.down_proj_bias", "E H", kReq, Role::ExpDownBias},
};
// Llama 4 (transformers' modeling_llama4.py): llama attention (its q/k norms have no weights);
// the MLP under feed_forward, dense (intermediate_size_mlp wide) or the router, the experts as
// Llama4TextExperts holds them (input-major: gate|up [E, H, 2I], down [E, I, H]) and the
// shared expert.
inline constexpr R kLlama4MlpHF[] = {
    {"feed_forward.gate_proj.weight", "I H", kReq, Role::Gate},
    {"feed_forward.up_proj.weight", "I H", kReq, Role::Up},
    {"feed_forward.down_proj.weight", "H I", kReq, Role::Down},
};
inline constexpr R kLlama4MoeHF[] = {
    {"feed_forward.router.weight", "E H", kReq, Role::Router},
    {"feed_forward.experts.gate_up_proj", "E H 2EI", kReq, Role::ExpGateUpIn},
    {"feed_forward.experts.down_proj", "E EI H", kReq, Role::ExpDown},
    {"feed_forward.shared_expert.gate_proj.weight", "SI H", kReq, Role::ShGate},
    {"feed_forward.shared_expert.up_proj.weight", "SI H", kReq, Role::ShUp},
    {"feed_forward.shared_expert.down_proj.weight", "H SI", kReq, Role::ShDown},
};
// DeepSeek-V2/V3 (transformers' modeling_deepseek_v3.py): multi-head latent attention; q through
// q_proj or the low-rank q_a/q_b path; routed experts (router with V3's score-correction
// bias) plus shared experts after first_k_dense_replace dense layers. FP8 checkpoints carry a
// weight_scale_inv beside each matrix (not run: the engine refuses them by dtype).
inline constexpr R kDeepseekAttnHF[] = {
    {"input_layernorm.weight", "H", kReq, Role::AttnNorm},
    {"self_attn.kv_a_proj_with_mqa.weight", "KVR H", kReq, Role::KVA},
    {"self_attn.kv_a_layernorm.weight", "KVL", kReq, Role::KVANorm},
    {"self_attn.kv_b_proj.weight", "KVB KVL", kReq, Role::KVB},
    {"self_attn.o_proj.weight", "H OV", kReq, Role::O},
    {"post_attention_layernorm.weight", "H", kReq, Role::FfnNorm},
    {"self_attn.kv_a_proj_with_mqa.weight_scale_inv", "*", kOpt},
    {"self_attn.kv_b_proj.weight_scale_inv", "*", kOpt},
    {"self_attn.o_proj.weight_scale_inv", "*", kOpt},
};
inline constexpr R kDeepseekQLoraHF[] = {
    {"self_attn.q_a_proj.weight", "QL H", kReq, Role::QA},
    {"self_attn.q_a_layernorm.weight", "QL", kReq, Role::QANorm},
    {"self_attn.q_b_proj.weight", "Q QL", kReq, Role::QB},
    {"self_attn.q_a_proj.weight_scale_inv", "*", kOpt},
    {"self_attn.q_b_proj.weight_scale_inv", "*", kOpt},
};
inline constexpr R kDeepseekQHF[] = {
    {"self_attn.q_proj.weight", "Q H", kReq, Role::Q},
    {"self_attn.q_proj.weight_scale_inv", "*", kOpt},
};
inline constexpr R kDeepseekMoeHF[] = {  // as saved: one tensor per expert
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.gate.e_score_correction_bias", "E", kOpt, Role::ExpProbsBias},
    {"mlp.experts.#.gate_proj.weight", "EI H", kReq, Role::ExpGate},
    {"mlp.experts.#.up_proj.weight", "EI H", kReq, Role::ExpUp},
    {"mlp.experts.#.down_proj.weight", "H EI", kReq, Role::ExpDown},
    {"mlp.shared_experts.gate_proj.weight", "SI H", kReq, Role::ShGate},
    {"mlp.shared_experts.up_proj.weight", "SI H", kReq, Role::ShUp},
    {"mlp.shared_experts.down_proj.weight", "H SI", kReq, Role::ShDown},
    {"mlp.experts.#.gate_proj.weight_scale_inv", "*", kOpt},
    {"mlp.experts.#.up_proj.weight_scale_inv", "*", kOpt},
    {"mlp.experts.#.down_proj.weight_scale_inv", "*", kOpt},
    {"mlp.shared_experts.gate_proj.weight_scale_inv", "*", kOpt},
    {"mlp.shared_experts.up_proj.weight_scale_inv", "*", kOpt},
    {"mlp.shared_experts.down_proj.weight_scale_inv", "*", kOpt},
};
inline constexpr R kDeepseekMoeFusedHF[] = {  // transformers 5 in memory
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.gate.e_score_correction_bias", "E", kOpt, Role::ExpProbsBias},
    {"mlp.experts.gate_up_proj", "E 2EI H", kReq, Role::ExpGateUp},
    {"mlp.experts.down_proj", "E H EI", kReq, Role::ExpDown},
    {"mlp.shared_experts.gate_proj.weight", "SI H", kReq, Role::ShGate},
    {"mlp.shared_experts.up_proj.weight", "SI H", kReq, Role::ShUp},
    {"mlp.shared_experts.down_proj.weight", "H SI", kReq, Role::ShDown},
};
inline constexpr R kDeepseekMlpHF[] = {  // the first_k_dense_replace layers
    {"mlp.gate_proj.weight", "I H", kReq, Role::Gate},
    {"mlp.up_proj.weight", "I H", kReq, Role::Up},
    {"mlp.down_proj.weight", "H I", kReq, Role::Down},
    {"mlp.gate_proj.weight_scale_inv", "*", kOpt},
    {"mlp.up_proj.weight_scale_inv", "*", kOpt},
    {"mlp.down_proj.weight_scale_inv", "*", kOpt},
};
inline constexpr R kPhi3LayerHF[] = {
    {"input_layernorm.weight", "H", kReq, Role::AttnNorm},
    {"self_attn.qkv_proj.weight", "QKV H", kReq, Role::QKV},
    {"self_attn.o_proj.weight", "H Q", kReq, Role::O},
    {"post_attention_layernorm.weight", "H", kReq, Role::FfnNorm},
    {"mlp.gate_up_proj.weight", "2I H", kReq, Role::GateUp},
    {"mlp.down_proj.weight", "H I", kReq, Role::Down},
};
// GPT-2 uses Conv1D: weights are stored (in, out), the transpose of nn.Linear.
inline constexpr R kGpt2LayerHF[] = {
    {"ln_1.weight", "H"},
    {"ln_1.bias", "H"},
    {"attn.c_attn.weight", "H 3H"},
    {"attn.c_attn.bias", "3H"},
    {"attn.c_proj.weight", "H H"},
    {"attn.c_proj.bias", "H"},
    {"attn.bias", "*", kOpt},         // causal-mask buffer in older saves
    {"attn.masked_bias", "*", kOpt},
    {"ln_2.weight", "H"},
    {"ln_2.bias", "H"},
    {"mlp.c_fc.weight", "H I"},
    {"mlp.c_fc.bias", "I"},
    {"mlp.c_proj.weight", "I H"},
    {"mlp.c_proj.bias", "H"},
};

inline constexpr R kWeightVH[] = {{"weight", "V H"}};
inline constexpr R kEmbedVH[] = {{"weight", "V H", kReq, Role::Embed}};
inline constexpr R kHeadVH[] = {{"weight", "V H", kReq, Role::Head}};
inline constexpr R kFinalNormH[] = {{"weight", "H", kReq, Role::FinalNorm}};
inline constexpr R kRopeFreqs[] = {{"weight", "*", kReq, Role::RopeFreqs}};
inline constexpr R kRopeLong[] = {{"weight", "*", kReq, Role::RopeFactorsLong}};
inline constexpr R kRopeShort[] = {{"weight", "*", kReq, Role::RopeFactorsShort}};
inline constexpr R kWeightH[] = {{"weight", "H"}};
inline constexpr R kWeightBiasH[] = {{"weight", "H"}, {"bias", "H"}};
inline constexpr R kWeightCtxH[] = {{"weight", "CTX H"}};
inline constexpr R kAnyWeight[] = {{"weight", "*"}};

inline constexpr GlobalModule kLlamaGlobalsHF[] = {
    {ModuleKind::Embedding, "embed_tokens", true, false, kEmbedVH},
    {ModuleKind::FinalNorm, "norm", true, false, kFinalNormH},
    {ModuleKind::Head, "lm_head", false, true, kHeadVH},
};
inline constexpr GlobalModule kGpt2GlobalsHF[] = {
    {ModuleKind::Embedding, "wte", true, false, kWeightVH},
    {ModuleKind::Embedding, "wpe", true, false, kWeightCtxH},
    {ModuleKind::FinalNorm, "ln_f", true, false, kWeightBiasH},
    {ModuleKind::Head, "lm_head", false, true, kWeightVH},
};

// ---- GGUF naming (llama.cpp gguf-py/gguf/constants.py, PyTorch-order shapes) -------------

inline constexpr R kAttnGGUF[] = {
    {"attn_norm.weight", "H", kReq, Role::AttnNorm},
    {"attn_q.weight", "Q H", kReq, Role::Q},
    {"attn_k.weight", "KV H", kReq, Role::K},
    {"attn_v.weight", "KV H", kReq, Role::V},
    {"attn_output.weight", "H Q", kReq, Role::O},
    {"attn_q.bias", "Q", kOpt, Role::QBias},
    {"attn_k.bias", "KV", kOpt, Role::KBias},
    {"attn_v.bias", "KV", kOpt, Role::VBias},
    {"attn_output.bias", "H", kOpt, Role::OBias},
    {"ffn_norm.weight", "H", kReq, Role::FfnNorm},
};
inline constexpr R kAttnBiasGGUF[] = {
    {"attn_q.bias", "Q", kReq, Role::QBias},
    {"attn_k.bias", "KV", kReq, Role::KBias},
    {"attn_v.bias", "KV", kReq, Role::VBias},
};
inline constexpr R kQkNormGGUF[] = {
    {"attn_q_norm.weight", "HD", kReq, Role::QNorm},
    {"attn_k_norm.weight", "HD", kReq, Role::KNorm},
};
// gemma2/3: attn_norm / post_attention_norm around attention, ffn_norm / post_ffw_norm around the MLP.
inline constexpr R kSandwichNormGGUF[] = {
    {"post_attention_norm.weight", "H", kReq, Role::PostAttnNorm},
    {"post_ffw_norm.weight", "H", kReq, Role::PostFfnNorm},
};
inline constexpr R kMlpGGUF[] = {
    {"ffn_gate.weight", "I H", kReq, Role::Gate},
    {"ffn_up.weight", "I H", kReq, Role::Up},
    {"ffn_down.weight", "H I", kReq, Role::Down},
};
inline constexpr R kMoeGGUF[] = {  // stacked experts (current convert_hf_to_gguf)
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"ffn_gate_exps.weight", "E EI H", kReq, Role::ExpGate},
    {"ffn_up_exps.weight", "E EI H", kReq, Role::ExpUp},
    {"ffn_down_exps.weight", "E H EI", kReq, Role::ExpDown},
};
inline constexpr R kMoeSplitGGUF[] = {  // per-expert tensors (early Mixtral GGUFs)
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"ffn_gate.#.weight", "EI H", kReq, Role::ExpGate},
    {"ffn_up.#.weight", "EI H", kReq, Role::ExpUp},
    {"ffn_down.#.weight", "H EI", kReq, Role::ExpDown},
};
inline constexpr R kMoeSharedGGUF[] = {  // qwen2moe: stacked experts and the shared expert
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"ffn_gate_exps.weight", "E EI H", kReq, Role::ExpGate},
    {"ffn_up_exps.weight", "E EI H", kReq, Role::ExpUp},
    {"ffn_down_exps.weight", "E H EI", kReq, Role::ExpDown},
    {"ffn_gate_shexp.weight", "SI H", kReq, Role::ShGate},
    {"ffn_up_shexp.weight", "SI H", kReq, Role::ShUp},
    {"ffn_down_shexp.weight", "H SI", kReq, Role::ShDown},
    {"ffn_gate_inp_shexp.weight", "H", kReq, Role::ShExpGate},
};
inline constexpr R kLlama4MoeGGUF[] = {  // stacked experts and the shared one, ungated
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"ffn_gate_exps.weight", "E EI H", kReq, Role::ExpGate},
    {"ffn_up_exps.weight", "E EI H", kReq, Role::ExpUp},
    {"ffn_down_exps.weight", "E H EI", kReq, Role::ExpDown},
    {"ffn_gate_shexp.weight", "SI H", kReq, Role::ShGate},
    {"ffn_up_shexp.weight", "SI H", kReq, Role::ShUp},
    {"ffn_down_shexp.weight", "H SI", kReq, Role::ShDown},
};
inline constexpr R kQkNormFullGGUF[] = {  // olmoe
    {"attn_q_norm.weight", "Q", kReq, Role::QNorm},
    {"attn_k_norm.weight", "KV", kReq, Role::KNorm},
};
// gpt-oss (llama.cpp's openai-moe): the post-attention norm is the MLP's input norm; gate and
// up apart, each with its bias; experts as ggml's MXFP4 blocks in the published GGUFs.
inline constexpr R kGptOssAttnGGUF[] = {
    {"attn_norm.weight", "H", kReq, Role::AttnNorm},
    {"attn_q.weight", "Q H", kReq, Role::Q},
    {"attn_k.weight", "KV H", kReq, Role::K},
    {"attn_v.weight", "KV H", kReq, Role::V},
    {"attn_output.weight", "H Q", kReq, Role::O},
    {"attn_q.bias", "Q", kOpt, Role::QBias},
    {"attn_k.bias", "KV", kOpt, Role::KBias},
    {"attn_v.bias", "KV", kOpt, Role::VBias},
    {"attn_output.bias", "H", kOpt, Role::OBias},
    {"attn_sinks.weight", "*", kReq, Role::Sinks},
    {"post_attention_norm.weight", "H", kReq, Role::FfnNorm},
};
inline constexpr R kGptOssMoeGGUF[] = {
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"ffn_gate_inp.bias", "E", kReq, Role::RouterBias},
    {"ffn_gate_exps.weight", "E EI H", kReq, Role::ExpGate},
    {"ffn_up_exps.weight", "E EI H", kReq, Role::ExpUp},
    {"ffn_down_exps.weight", "E H EI", kReq, Role::ExpDown},
    {"ffn_gate_exps.bias", "E EI", kReq, Role::ExpGateBias},
    {"ffn_up_exps.bias", "E EI", kReq, Role::ExpUpBias},
    {"ffn_down_exps.bias", "E H", kReq, Role::ExpDownBias},
};
// deepseek2 as convert_hf_to_gguf writes it (llama.cpp llama-arch.cpp names): kv_b split into
// k_b (transposed, [heads, rank, nope]) and v_b ([heads, v, rank]); older files hold attn_kv_b.
inline constexpr R kDeepseekAttnGGUF[] = {
    {"attn_norm.weight", "H", kReq, Role::AttnNorm},
    {"attn_kv_a_mqa.weight", "KVR H", kReq, Role::KVA},
    {"attn_kv_a_norm.weight", "KVL", kReq, Role::KVANorm},
    {"attn_output.weight", "H OV", kReq, Role::O},
    {"ffn_norm.weight", "H", kReq, Role::FfnNorm},
};
inline constexpr R kDeepseekKvbSplitGGUF[] = {
    {"attn_k_b.weight", "NH KVL NOPE", kReq, Role::KB},
    {"attn_v_b.weight", "NH VHD KVL", kReq, Role::VB},
};
inline constexpr R kDeepseekKvbGGUF[] = {{"attn_kv_b.weight", "KVB KVL", kReq, Role::KVB}};
inline constexpr R kDeepseekQLoraGGUF[] = {
    {"attn_q_a.weight", "QL H", kReq, Role::QA},
    {"attn_q_a_norm.weight", "QL", kReq, Role::QANorm},
    {"attn_q_b.weight", "Q QL", kReq, Role::QB},
};
inline constexpr R kDeepseekQGGUF[] = {{"attn_q.weight", "Q H", kReq, Role::Q}};
inline constexpr R kDeepseekMoeGGUF[] = {
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"exp_probs_b.bias", "E", kOpt, Role::ExpProbsBias},
    {"ffn_gate_exps.weight", "E EI H", kReq, Role::ExpGate},
    {"ffn_up_exps.weight", "E EI H", kReq, Role::ExpUp},
    {"ffn_down_exps.weight", "E H EI", kReq, Role::ExpDown},
    {"ffn_gate_shexp.weight", "SI H", kReq, Role::ShGate},
    {"ffn_up_shexp.weight", "SI H", kReq, Role::ShUp},
    {"ffn_down_shexp.weight", "H SI", kReq, Role::ShDown},
};
inline constexpr R kPhi3LayerGGUF[] = {
    {"attn_norm.weight", "H", kReq, Role::AttnNorm},
    {"attn_qkv.weight", "QKV H", kReq, Role::QKV},
    {"attn_output.weight", "H Q", kReq, Role::O},
    {"ffn_norm.weight", "H", kReq, Role::FfnNorm},
    {"ffn_up.weight", "2I H", kReq, Role::GateUp},  // gate and up fused, as in HF gate_up_proj
    {"ffn_down.weight", "H I", kReq, Role::Down},
};
inline constexpr R kGpt2LayerGGUF[] = {  // the converter transposes Conv1D into Linear order
    {"attn_norm.weight", "H"},
    {"attn_norm.bias", "H"},
    {"attn_qkv.weight", "3H H"},
    {"attn_qkv.bias", "3H"},
    {"attn_output.weight", "H H"},
    {"attn_output.bias", "H"},
    {"ffn_norm.weight", "H"},
    {"ffn_norm.bias", "H"},
    {"ffn_up.weight", "I H"},
    {"ffn_up.bias", "I"},
    {"ffn_down.weight", "H I"},
    {"ffn_down.bias", "H"},
};

inline constexpr GlobalModule kLlamaGlobalsGGUF[] = {
    {ModuleKind::Embedding, "token_embd", true, false, kEmbedVH},
    {ModuleKind::FinalNorm, "output_norm", true, false, kFinalNormH},
    {ModuleKind::Head, "output", true, true, kHeadVH},
    {ModuleKind::Other, "rope_freqs", true, true, kRopeFreqs},  // llama-3 rope scaling factors
};
inline constexpr GlobalModule kPhi3GlobalsGGUF[] = {
    {ModuleKind::Embedding, "token_embd", true, false, kEmbedVH},
    {ModuleKind::FinalNorm, "output_norm", true, false, kFinalNormH},
    {ModuleKind::Head, "output", true, true, kHeadVH},
    {ModuleKind::Other, "rope_factors_long", true, true, kRopeLong},  // longrope
    {ModuleKind::Other, "rope_factors_short", true, true, kRopeShort},
};
inline constexpr GlobalModule kGpt2GlobalsGGUF[] = {
    {ModuleKind::Embedding, "token_embd", true, false, kWeightVH},
    {ModuleKind::Embedding, "position_embd", true, false, kWeightCtxH},
    {ModuleKind::FinalNorm, "output_norm", true, false, kWeightBiasH},
    {ModuleKind::Head, "output", true, true, kWeightVH},
};

// ---- layer compositions ------------------------------------------------------------------

inline constexpr Rules kAttnHFAlt[] = {kAttnHF};
inline constexpr Rules kAttnBiasHFAlt[] = {kAttnBiasHF};
inline constexpr Rules kQkNormHFAlt[] = {kQkNormHF};
inline constexpr Rules kGemma2AttnHFAlt[] = {kGemma2AttnHF};
inline constexpr Rules kSandwichHFAlt[] = {kSandwichNormHF};
inline constexpr Rules kMlpHFAlt[] = {kMlpHF};
inline constexpr Rules kMoeHFAlt[] = {kMoeMixtralHF, kMoeFusedHF};
// qwen3_moe mlp_only_layers are dense; experts one tensor each (as saved) or fused (as in memory)
inline constexpr Rules kMoeExpertsHFAlt[] = {kMoeExpertsHF, kMoeFusedHF, kMlpHF};
inline constexpr Rules kMoeSharedHFAlt[] = {kMoeSharedHF, kMoeSharedFusedHF, kMlpHF};  // qwen2_moe: off decoder_sparse_step
inline constexpr Rules kQkNormFullHFAlt[] = {kQkNormFullHF};
inline constexpr Rules kPhi3HFAlt[] = {kPhi3LayerHF};
inline constexpr Rules kDeepseekAttnHFAlt[] = {kDeepseekAttnHF};
inline constexpr Rules kDeepseekQHFAlt[] = {kDeepseekQLoraHF, kDeepseekQHF};
inline constexpr Rules kDeepseekMoeHFAlt[] = {kDeepseekMoeHF, kDeepseekMoeFusedHF, kDeepseekMlpHF};
inline constexpr Rules kDeepseekAttnGGUFAlt[] = {kDeepseekAttnGGUF};
inline constexpr Rules kDeepseekKvbGGUFAlt[] = {kDeepseekKvbSplitGGUF, kDeepseekKvbGGUF};
inline constexpr Rules kDeepseekQGGUFAlt[] = {kDeepseekQLoraGGUF, kDeepseekQGGUF};
inline constexpr Rules kDeepseekMoeGGUFAlt[] = {kDeepseekMoeGGUF, kMlpGGUF};
inline constexpr Rules kGptOssAttnHFAlt[] = {kGptOssAttnHF};
inline constexpr Rules kGptOssMoeHFAlt[] = {kGptOssMoeHF, kGptOssMoeMxfp4HF};
inline constexpr Rules kGpt2HFAlt[] = {kGpt2LayerHF};
inline constexpr Rules kLlama4FfnHFAlt[] = {kLlama4MoeHF, kLlama4MlpHF};
inline constexpr Rules kAttnGGUFAlt[] = {kAttnGGUF};
inline constexpr Rules kAttnBiasGGUFAlt[] = {kAttnBiasGGUF};
inline constexpr Rules kQkNormGGUFAlt[] = {kQkNormGGUF};
inline constexpr Rules kSandwichGGUFAlt[] = {kSandwichNormGGUF};
inline constexpr Rules kMlpGGUFAlt[] = {kMlpGGUF};
inline constexpr Rules kMoeGGUFAlt[] = {kMoeGGUF, kMoeSplitGGUF};
inline constexpr Rules kMoeOrDenseGGUFAlt[] = {kMoeGGUF, kMlpGGUF};
inline constexpr Rules kMoeSharedGGUFAlt[] = {kMoeSharedGGUF, kMlpGGUF};
inline constexpr Rules kQkNormFullGGUFAlt[] = {kQkNormFullGGUF};
inline constexpr Rules kPhi3GGUFAlt[] = {kPhi3LayerGGUF};
inline constexpr Rules kGptOssAttnGGUFAlt[] = {kGptOssAttnGGUF};
inline constexpr Rules kGptOssMoeGGUFAlt[] = {kGptOssMoeGGUF};
inline constexpr Rules kGpt2GGUFAlt[] = {kGpt2LayerGGUF};
inline constexpr Rules kLlama4FfnGGUFAlt[] = {kLlama4MoeGGUF, kMlpGGUF};

inline constexpr LayerSlot kLlamaHF[] = {{kAttnHFAlt}, {kMlpHFAlt}};
inline constexpr LayerSlot kQwen2HF[] = {{kAttnHFAlt}, {kAttnBiasHFAlt}, {kMlpHFAlt}};
inline constexpr LayerSlot kQwen3HF[] = {{kAttnHFAlt}, {kQkNormHFAlt}, {kMlpHFAlt}};
inline constexpr LayerSlot kGemma2HF[] = {{kGemma2AttnHFAlt}, {kSandwichHFAlt}, {kMlpHFAlt}};
inline constexpr LayerSlot kGemma3HF[] = {{kGemma2AttnHFAlt}, {kQkNormHFAlt}, {kSandwichHFAlt}, {kMlpHFAlt}};
inline constexpr LayerSlot kMixtralHF[] = {{kAttnHFAlt}, {kMoeHFAlt}};
inline constexpr LayerSlot kQwen2MoeHF[] = {{kAttnHFAlt}, {kAttnBiasHFAlt}, {kMoeSharedHFAlt}};
inline constexpr LayerSlot kQwen3MoeHF[] = {{kAttnHFAlt}, {kQkNormHFAlt}, {kMoeExpertsHFAlt}};
inline constexpr LayerSlot kOlmoeHF[] = {{kAttnHFAlt}, {kQkNormFullHFAlt}, {kMoeExpertsHFAlt}};
inline constexpr LayerSlot kPhi3HF[] = {{kPhi3HFAlt}};
inline constexpr LayerSlot kGptOssHF[] = {{kGptOssAttnHFAlt}, {kGptOssMoeHFAlt}};
inline constexpr LayerSlot kGpt2HF[] = {{kGpt2HFAlt}};
inline constexpr LayerSlot kLlama4HF[] = {{kAttnHFAlt}, {kLlama4FfnHFAlt}};
inline constexpr LayerSlot kDeepseekHF[] = {{kDeepseekAttnHFAlt}, {kDeepseekQHFAlt}, {kDeepseekMoeHFAlt}};
inline constexpr LayerSlot kDeepseekGGUF[] = {{kDeepseekAttnGGUFAlt}, {kDeepseekKvbGGUFAlt}, {kDeepseekQGGUFAlt},
                                              {kDeepseekMoeGGUFAlt}};
inline constexpr LayerSlot kLlamaGGUF[] = {{kAttnGGUFAlt}, {kMlpGGUFAlt}};
inline constexpr LayerSlot kQwen2GGUF[] = {{kAttnGGUFAlt}, {kAttnBiasGGUFAlt}, {kMlpGGUFAlt}};
inline constexpr LayerSlot kQwen3GGUF[] = {{kAttnGGUFAlt}, {kQkNormGGUFAlt}, {kMlpGGUFAlt}};
inline constexpr LayerSlot kGemma2GGUF[] = {{kAttnGGUFAlt}, {kSandwichGGUFAlt}, {kMlpGGUFAlt}};
inline constexpr LayerSlot kGemma3GGUF[] = {{kAttnGGUFAlt}, {kQkNormGGUFAlt}, {kSandwichGGUFAlt}, {kMlpGGUFAlt}};
inline constexpr LayerSlot kMixtralGGUF[] = {{kAttnGGUFAlt}, {kMoeGGUFAlt}};
inline constexpr LayerSlot kQwen2MoeGGUF[] = {{kAttnGGUFAlt}, {kAttnBiasGGUFAlt}, {kMoeSharedGGUFAlt}};
inline constexpr LayerSlot kQwen3MoeGGUF[] = {{kAttnGGUFAlt}, {kQkNormGGUFAlt}, {kMoeOrDenseGGUFAlt}};
inline constexpr LayerSlot kOlmoeGGUF[] = {{kAttnGGUFAlt}, {kQkNormFullGGUFAlt}, {kMoeOrDenseGGUFAlt}};
inline constexpr LayerSlot kPhi3GGUF[] = {{kPhi3GGUFAlt}};
inline constexpr LayerSlot kGptOssGGUF[] = {{kGptOssAttnGGUFAlt}, {kGptOssMoeGGUFAlt}};
inline constexpr LayerSlot kGpt2GGUF[] = {{kGpt2GGUFAlt}};
inline constexpr LayerSlot kLlama4GGUF[] = {{kAttnGGUFAlt}, {kLlama4FfnGGUFAlt}};

inline constexpr std::string_view kModelRoots[] = {"model.", ""};
// Multimodal wrappers: transformers 5 modules, then the Hub's older checkpoint names.
inline constexpr std::string_view kWrappedRoots[] = {"model.language_model.", "language_model.model.", "model.", ""};
// Text families that are also a wrapper's language model (llava: llama, mistral3: mistral):
// their own names first (convert writes the first root), then the wrapped ones.
inline constexpr std::string_view kModelOrWrappedRoots[] = {"model.", "", "model.language_model.", "language_model.model."};
inline constexpr std::string_view kGpt2Roots[] = {"transformer.", ""};
inline constexpr std::string_view kGGUFRoots[] = {""};

}  // namespace nunchaku::tensor_rules
