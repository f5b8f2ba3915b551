#include "model/arch_table.hpp"

#include <algorithm>
#include <cctype>

namespace nunchaku {

namespace {

using R = TensorRule;
using Rules = std::span<const TensorRule>;
constexpr bool kOpt = true;
constexpr bool kReq = false;

// ---- Hugging Face naming (transformers modeling_*.py) ------------------------------------

// Llama-style attention; the biases appear with attention_bias=true (llama) and always in qwen2.
constexpr R kAttnHF[] = {
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
constexpr R kAttnBiasHF[] = {  // qwen2: q/k/v biases required
    {"self_attn.q_proj.bias", "Q", kReq, Role::QBias},
    {"self_attn.k_proj.bias", "KV", kReq, Role::KBias},
    {"self_attn.v_proj.bias", "KV", kReq, Role::VBias},
};
constexpr R kQkNormHF[] = {  // qwen3
    {"self_attn.q_norm.weight", "HD", kReq, Role::QNorm},
    {"self_attn.k_norm.weight", "HD", kReq, Role::KNorm},
};
// gemma2/3: input_layernorm before attention, post_attention_layernorm on its output (not
// the MLP's input norm as in llama), pre_/post_feedforward_layernorm around the MLP.
constexpr R kGemma2AttnHF[] = {
    {"input_layernorm.weight", "H", kReq, Role::AttnNorm},
    {"self_attn.q_proj.weight", "Q H", kReq, Role::Q},
    {"self_attn.k_proj.weight", "KV H", kReq, Role::K},
    {"self_attn.v_proj.weight", "KV H", kReq, Role::V},
    {"self_attn.o_proj.weight", "H Q", kReq, Role::O},
    {"post_attention_layernorm.weight", "H", kReq, Role::PostAttnNorm},
};
constexpr R kSandwichNormHF[] = {
    {"pre_feedforward_layernorm.weight", "H", kReq, Role::FfnNorm},
    {"post_feedforward_layernorm.weight", "H", kReq, Role::PostFfnNorm},
};
constexpr R kMlpHF[] = {
    {"mlp.gate_proj.weight", "I H", kReq, Role::Gate},
    {"mlp.up_proj.weight", "I H", kReq, Role::Up},
    {"mlp.down_proj.weight", "H I", kReq, Role::Down},
    {"mlp.gate_proj.bias", "I", kOpt, Role::GateBias},
    {"mlp.up_proj.bias", "I", kOpt, Role::UpBias},
    {"mlp.down_proj.bias", "H", kOpt, Role::DownBias},
};
constexpr R kMoeMixtralHF[] = {  // every Mixtral on the Hub; transformers 5 saves it so too
    {"block_sparse_moe.gate.weight", "E H", kReq, Role::Router},
    {"block_sparse_moe.experts.#.w1.weight", "EI H", kReq, Role::ExpGate},
    {"block_sparse_moe.experts.#.w2.weight", "H EI", kReq, Role::ExpDown},
    {"block_sparse_moe.experts.#.w3.weight", "EI H", kReq, Role::ExpUp},
};
constexpr R kMoeFusedHF[] = {  // transformers 5 in memory (experts fused per layer)
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.experts.gate_up_proj", "E 2EI H", kReq, Role::ExpGateUp},
    {"mlp.experts.down_proj", "E H EI", kReq, Role::ExpDown},
};
// Qwen2-MoE, Qwen3-MoE, OLMoE as transformers 5 saves them: the router, one tensor per
// expert; qwen2_moe adds a shared expert behind a sigmoid gate.
constexpr R kMoeExpertsHF[] = {
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.experts.#.gate_proj.weight", "EI H", kReq, Role::ExpGate},
    {"mlp.experts.#.up_proj.weight", "EI H", kReq, Role::ExpUp},
    {"mlp.experts.#.down_proj.weight", "H EI", kReq, Role::ExpDown},
};
constexpr R kMoeSharedHF[] = {
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.experts.#.gate_proj.weight", "EI H", kReq, Role::ExpGate},
    {"mlp.experts.#.up_proj.weight", "EI H", kReq, Role::ExpUp},
    {"mlp.experts.#.down_proj.weight", "H EI", kReq, Role::ExpDown},
    {"mlp.shared_expert.gate_proj.weight", "SI H", kReq, Role::ShGate},
    {"mlp.shared_expert.up_proj.weight", "SI H", kReq, Role::ShUp},
    {"mlp.shared_expert.down_proj.weight", "H SI", kReq, Role::ShDown},
    {"mlp.shared_expert_gate.weight", "1 H", kReq, Role::ShExpGate},
};
constexpr R kMoeSharedFusedHF[] = {  // qwen2_moe as transformers 5 holds it in memory
    {"mlp.gate.weight", "E H", kReq, Role::Router},
    {"mlp.experts.gate_up_proj", "E 2EI H", kReq, Role::ExpGateUp},
    {"mlp.experts.down_proj", "E H EI", kReq, Role::ExpDown},
    {"mlp.shared_expert.gate_proj.weight", "SI H", kReq, Role::ShGate},
    {"mlp.shared_expert.up_proj.weight", "SI H", kReq, Role::ShUp},
    {"mlp.shared_expert.down_proj.weight", "H SI", kReq, Role::ShDown},
    {"mlp.shared_expert_gate.weight", "1 H", kReq, Role::ShExpGate},
};
constexpr R kQkNormFullHF[] = {  // olmoe: one norm over all of q (and of k), not per head
    {"self_attn.q_norm.weight", "Q", kReq, Role::QNorm},
    {"self_attn.k_norm.weight", "KV", kReq, Role::KNorm},
};
// gpt-oss (transformers' modeling_gpt_oss.py): llama attention with biases and one sink
// logit per head; the router is a linear with bias; experts' gate|up interleaved in one
// stacked tensor, input-major [E, H, 2I] in bf16/fp32 files, or MXFP4 (*_blocks [E, rows,
// cols/32, 16] + *_scales [E, rows, cols/32], output-major) as OpenAI ships them.
constexpr R kGptOssAttnHF[] = {
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
constexpr R kGptOssMoeHF[] = {
    {"mlp.router.weight", "E H", kReq, Role::Router},
    {"mlp.router.bias", "E", kReq, Role::RouterBias},
    {"mlp.experts.gate_up_proj", "E H 2EI", kReq, Role::ExpGateUpMixed},
    {"mlp.experts.gate_up_proj_bias", "E 2EI", kReq, Role::ExpGateUpBias},
    {"mlp.experts.down_proj", "E EI H", kReq, Role::ExpDown},
    {"mlp.experts.down_proj_bias", "E H", kReq, Role::ExpDownBias},
};
constexpr R kGptOssMoeMxfp4HF[] = {
    {"mlp.router.weight", "E H", kReq, Role::Router},
    {"mlp.router.bias", "E", kReq, Role::RouterBias},
    {"mlp.experts.gate_up_proj_blocks", "E 2EI * *", kReq, Role::ExpGateUpMixed},
    {"mlp.experts.gate_up_proj_scales", "E 2EI *", kReq, Role::ExpGateUpScales},
    {"mlp.experts.gate_up_proj_bias", "E 2EI", kReq, Role::ExpGateUpBias},
    {"mlp.experts.down_proj_blocks", "E H * *", kReq, Role::ExpDown},
    {"mlp.experts.down_proj_scales", "E H *", kReq, Role::ExpDownScales},
    {"mlp.experts.down_proj_bias", "E H", kReq, Role::ExpDownBias},
};
constexpr R kPhi3LayerHF[] = {
    {"input_layernorm.weight", "H", kReq, Role::AttnNorm},
    {"self_attn.qkv_proj.weight", "QKV H", kReq, Role::QKV},
    {"self_attn.o_proj.weight", "H Q", kReq, Role::O},
    {"post_attention_layernorm.weight", "H", kReq, Role::FfnNorm},
    {"mlp.gate_up_proj.weight", "2I H", kReq, Role::GateUp},
    {"mlp.down_proj.weight", "H I", kReq, Role::Down},
};
// GPT-2 uses Conv1D: weights are stored (in, out), the transpose of nn.Linear.
constexpr R kGpt2LayerHF[] = {
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

constexpr R kWeightVH[] = {{"weight", "V H"}};
constexpr R kEmbedVH[] = {{"weight", "V H", kReq, Role::Embed}};
constexpr R kHeadVH[] = {{"weight", "V H", kReq, Role::Head}};
constexpr R kFinalNormH[] = {{"weight", "H", kReq, Role::FinalNorm}};
constexpr R kRopeFreqs[] = {{"weight", "*", kReq, Role::RopeFreqs}};
constexpr R kWeightH[] = {{"weight", "H"}};
constexpr R kWeightBiasH[] = {{"weight", "H"}, {"bias", "H"}};
constexpr R kWeightCtxH[] = {{"weight", "CTX H"}};
constexpr R kAnyWeight[] = {{"weight", "*"}};

constexpr GlobalModule kLlamaGlobalsHF[] = {
    {ModuleKind::Embedding, "embed_tokens", true, false, kEmbedVH},
    {ModuleKind::FinalNorm, "norm", true, false, kFinalNormH},
    {ModuleKind::Head, "lm_head", false, true, kHeadVH},
};
constexpr GlobalModule kGpt2GlobalsHF[] = {
    {ModuleKind::Embedding, "wte", true, false, kWeightVH},
    {ModuleKind::Embedding, "wpe", true, false, kWeightCtxH},
    {ModuleKind::FinalNorm, "ln_f", true, false, kWeightBiasH},
    {ModuleKind::Head, "lm_head", false, true, kWeightVH},
};

// ---- GGUF naming (llama.cpp gguf-py/gguf/constants.py, PyTorch-order shapes) -------------

constexpr R kAttnGGUF[] = {
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
constexpr R kAttnBiasGGUF[] = {
    {"attn_q.bias", "Q", kReq, Role::QBias},
    {"attn_k.bias", "KV", kReq, Role::KBias},
    {"attn_v.bias", "KV", kReq, Role::VBias},
};
constexpr R kQkNormGGUF[] = {
    {"attn_q_norm.weight", "HD", kReq, Role::QNorm},
    {"attn_k_norm.weight", "HD", kReq, Role::KNorm},
};
// gemma2/3: attn_norm / post_attention_norm around attention, ffn_norm / post_ffw_norm around the MLP.
constexpr R kSandwichNormGGUF[] = {
    {"post_attention_norm.weight", "H", kReq, Role::PostAttnNorm},
    {"post_ffw_norm.weight", "H", kReq, Role::PostFfnNorm},
};
constexpr R kMlpGGUF[] = {
    {"ffn_gate.weight", "I H", kReq, Role::Gate},
    {"ffn_up.weight", "I H", kReq, Role::Up},
    {"ffn_down.weight", "H I", kReq, Role::Down},
};
constexpr R kMoeGGUF[] = {  // stacked experts (current convert_hf_to_gguf)
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"ffn_gate_exps.weight", "E EI H", kReq, Role::ExpGate},
    {"ffn_up_exps.weight", "E EI H", kReq, Role::ExpUp},
    {"ffn_down_exps.weight", "E H EI", kReq, Role::ExpDown},
};
constexpr R kMoeSplitGGUF[] = {  // per-expert tensors (early Mixtral GGUFs)
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"ffn_gate.#.weight", "EI H", kReq, Role::ExpGate},
    {"ffn_up.#.weight", "EI H", kReq, Role::ExpUp},
    {"ffn_down.#.weight", "H EI", kReq, Role::ExpDown},
};
constexpr R kMoeSharedGGUF[] = {  // qwen2moe: stacked experts and the shared expert
    {"ffn_gate_inp.weight", "E H", kReq, Role::Router},
    {"ffn_gate_exps.weight", "E EI H", kReq, Role::ExpGate},
    {"ffn_up_exps.weight", "E EI H", kReq, Role::ExpUp},
    {"ffn_down_exps.weight", "E H EI", kReq, Role::ExpDown},
    {"ffn_gate_shexp.weight", "SI H", kReq, Role::ShGate},
    {"ffn_up_shexp.weight", "SI H", kReq, Role::ShUp},
    {"ffn_down_shexp.weight", "H SI", kReq, Role::ShDown},
    {"ffn_gate_inp_shexp.weight", "H", kReq, Role::ShExpGate},
};
constexpr R kQkNormFullGGUF[] = {  // olmoe
    {"attn_q_norm.weight", "Q", kReq, Role::QNorm},
    {"attn_k_norm.weight", "KV", kReq, Role::KNorm},
};
constexpr R kPhi3LayerGGUF[] = {
    {"attn_norm.weight", "H", kReq, Role::AttnNorm},
    {"attn_qkv.weight", "QKV H", kReq, Role::QKV},
    {"attn_output.weight", "H Q", kReq, Role::O},
    {"ffn_norm.weight", "H", kReq, Role::FfnNorm},
    {"ffn_up.weight", "2I H", kReq, Role::GateUp},  // gate and up fused, as in HF gate_up_proj
    {"ffn_down.weight", "H I", kReq, Role::Down},
};
constexpr R kGpt2LayerGGUF[] = {  // the converter transposes Conv1D into Linear order
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

constexpr GlobalModule kLlamaGlobalsGGUF[] = {
    {ModuleKind::Embedding, "token_embd", true, false, kEmbedVH},
    {ModuleKind::FinalNorm, "output_norm", true, false, kFinalNormH},
    {ModuleKind::Head, "output", true, true, kHeadVH},
    {ModuleKind::Other, "rope_freqs", true, true, kRopeFreqs},  // llama-3 rope scaling factors
};
constexpr GlobalModule kPhi3GlobalsGGUF[] = {
    {ModuleKind::Embedding, "token_embd", true, false, kEmbedVH},
    {ModuleKind::FinalNorm, "output_norm", true, false, kFinalNormH},
    {ModuleKind::Head, "output", true, true, kHeadVH},
    {ModuleKind::Other, "rope_factors_long", true, true, kAnyWeight},  // longrope
    {ModuleKind::Other, "rope_factors_short", true, true, kAnyWeight},
};
constexpr GlobalModule kGpt2GlobalsGGUF[] = {
    {ModuleKind::Embedding, "token_embd", true, false, kWeightVH},
    {ModuleKind::Embedding, "position_embd", true, false, kWeightCtxH},
    {ModuleKind::FinalNorm, "output_norm", true, false, kWeightBiasH},
    {ModuleKind::Head, "output", true, true, kWeightVH},
};

// ---- layer compositions ------------------------------------------------------------------

constexpr Rules kAttnHFAlt[] = {kAttnHF};
constexpr Rules kAttnBiasHFAlt[] = {kAttnBiasHF};
constexpr Rules kQkNormHFAlt[] = {kQkNormHF};
constexpr Rules kGemma2AttnHFAlt[] = {kGemma2AttnHF};
constexpr Rules kSandwichHFAlt[] = {kSandwichNormHF};
constexpr Rules kMlpHFAlt[] = {kMlpHF};
constexpr Rules kMoeHFAlt[] = {kMoeMixtralHF, kMoeFusedHF};
// qwen3_moe mlp_only_layers are dense; experts one tensor each (as saved) or fused (as in memory)
constexpr Rules kMoeExpertsHFAlt[] = {kMoeExpertsHF, kMoeFusedHF, kMlpHF};
constexpr Rules kMoeSharedHFAlt[] = {kMoeSharedHF, kMoeSharedFusedHF, kMlpHF};  // qwen2_moe: off decoder_sparse_step
constexpr Rules kQkNormFullHFAlt[] = {kQkNormFullHF};
constexpr Rules kPhi3HFAlt[] = {kPhi3LayerHF};
constexpr Rules kGptOssAttnHFAlt[] = {kGptOssAttnHF};
constexpr Rules kGptOssMoeHFAlt[] = {kGptOssMoeHF, kGptOssMoeMxfp4HF};
constexpr Rules kGpt2HFAlt[] = {kGpt2LayerHF};
constexpr Rules kAttnGGUFAlt[] = {kAttnGGUF};
constexpr Rules kAttnBiasGGUFAlt[] = {kAttnBiasGGUF};
constexpr Rules kQkNormGGUFAlt[] = {kQkNormGGUF};
constexpr Rules kSandwichGGUFAlt[] = {kSandwichNormGGUF};
constexpr Rules kMlpGGUFAlt[] = {kMlpGGUF};
constexpr Rules kMoeGGUFAlt[] = {kMoeGGUF, kMoeSplitGGUF};
constexpr Rules kMoeOrDenseGGUFAlt[] = {kMoeGGUF, kMlpGGUF};
constexpr Rules kMoeSharedGGUFAlt[] = {kMoeSharedGGUF, kMlpGGUF};
constexpr Rules kQkNormFullGGUFAlt[] = {kQkNormFullGGUF};
constexpr Rules kPhi3GGUFAlt[] = {kPhi3LayerGGUF};
constexpr Rules kGpt2GGUFAlt[] = {kGpt2LayerGGUF};

constexpr LayerSlot kLlamaHF[] = {{kAttnHFAlt}, {kMlpHFAlt}};
constexpr LayerSlot kQwen2HF[] = {{kAttnHFAlt}, {kAttnBiasHFAlt}, {kMlpHFAlt}};
constexpr LayerSlot kQwen3HF[] = {{kAttnHFAlt}, {kQkNormHFAlt}, {kMlpHFAlt}};
constexpr LayerSlot kGemma2HF[] = {{kGemma2AttnHFAlt}, {kSandwichHFAlt}, {kMlpHFAlt}};
constexpr LayerSlot kGemma3HF[] = {{kGemma2AttnHFAlt}, {kQkNormHFAlt}, {kSandwichHFAlt}, {kMlpHFAlt}};
constexpr LayerSlot kMixtralHF[] = {{kAttnHFAlt}, {kMoeHFAlt}};
constexpr LayerSlot kQwen2MoeHF[] = {{kAttnHFAlt}, {kAttnBiasHFAlt}, {kMoeSharedHFAlt}};
constexpr LayerSlot kQwen3MoeHF[] = {{kAttnHFAlt}, {kQkNormHFAlt}, {kMoeExpertsHFAlt}};
constexpr LayerSlot kOlmoeHF[] = {{kAttnHFAlt}, {kQkNormFullHFAlt}, {kMoeExpertsHFAlt}};
constexpr LayerSlot kPhi3HF[] = {{kPhi3HFAlt}};
constexpr LayerSlot kGptOssHF[] = {{kGptOssAttnHFAlt}, {kGptOssMoeHFAlt}};
constexpr LayerSlot kGpt2HF[] = {{kGpt2HFAlt}};
constexpr LayerSlot kLlamaGGUF[] = {{kAttnGGUFAlt}, {kMlpGGUFAlt}};
constexpr LayerSlot kQwen2GGUF[] = {{kAttnGGUFAlt}, {kAttnBiasGGUFAlt}, {kMlpGGUFAlt}};
constexpr LayerSlot kQwen3GGUF[] = {{kAttnGGUFAlt}, {kQkNormGGUFAlt}, {kMlpGGUFAlt}};
constexpr LayerSlot kGemma2GGUF[] = {{kAttnGGUFAlt}, {kSandwichGGUFAlt}, {kMlpGGUFAlt}};
constexpr LayerSlot kGemma3GGUF[] = {{kAttnGGUFAlt}, {kQkNormGGUFAlt}, {kSandwichGGUFAlt}, {kMlpGGUFAlt}};
constexpr LayerSlot kMixtralGGUF[] = {{kAttnGGUFAlt}, {kMoeGGUFAlt}};
constexpr LayerSlot kQwen2MoeGGUF[] = {{kAttnGGUFAlt}, {kAttnBiasGGUFAlt}, {kMoeSharedGGUFAlt}};
constexpr LayerSlot kQwen3MoeGGUF[] = {{kAttnGGUFAlt}, {kQkNormGGUFAlt}, {kMoeOrDenseGGUFAlt}};
constexpr LayerSlot kOlmoeGGUF[] = {{kAttnGGUFAlt}, {kQkNormFullGGUFAlt}, {kMoeOrDenseGGUFAlt}};
constexpr LayerSlot kPhi3GGUF[] = {{kPhi3GGUFAlt}};
constexpr LayerSlot kGpt2GGUF[] = {{kGpt2GGUFAlt}};

constexpr std::string_view kModelRoots[] = {"model.", ""};
// Multimodal wrappers: transformers 5 modules, then the Hub's older checkpoint names.
constexpr std::string_view kWrappedRoots[] = {"model.language_model.", "language_model.model.", "model.", ""};
constexpr std::string_view kGpt2Roots[] = {"transformer.", ""};
constexpr std::string_view kGGUFRoots[] = {""};

constexpr ArchEntry kTable[] = {
    {"llama", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kLlamaHF},
    {"mistral", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kLlamaHF},
    {"qwen2", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kQwen2HF},
    {"qwen3", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kQwen3HF},
    {"gemma", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kLlamaHF},
    {"gemma2", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kGemma2HF},
    {"gemma3", Naming::HF, kWrappedRoots, "layers.", kLlamaGlobalsHF, kGemma3HF},
    {"phi3", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kPhi3HF},
    {"mixtral", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kMixtralHF},
    {"qwen2_moe", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kQwen2MoeHF},
    {"qwen3_moe", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kQwen3MoeHF},
    {"olmoe", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kOlmoeHF},
    {"gpt_oss", Naming::HF, kModelRoots, "layers.", kLlamaGlobalsHF, kGptOssHF},
    {"gpt2", Naming::HF, kGpt2Roots, "h.", kGpt2GlobalsHF, kGpt2HF},
    {"llama", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kLlamaGGUF},
    {"mistral", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kLlamaGGUF},
    {"qwen2", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kQwen2GGUF},
    {"qwen3", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kQwen3GGUF},
    {"gemma", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kLlamaGGUF},
    {"gemma2", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kGemma2GGUF},
    {"gemma3", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kGemma3GGUF},
    {"phi3", Naming::GGUF, kGGUFRoots, "blk.", kPhi3GlobalsGGUF, kPhi3GGUF},
    {"mixtral", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kMixtralGGUF},
    {"qwen2_moe", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kQwen2MoeGGUF},
    {"qwen3_moe", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kQwen3MoeGGUF},
    {"olmoe", Naming::GGUF, kGGUFRoots, "blk.", kLlamaGlobalsGGUF, kOlmoeGGUF},
    {"gpt2", Naming::GGUF, kGGUFRoots, "blk.", kGpt2GlobalsGGUF, kGpt2GGUF},
};

// HF model_type / GGUF general.architecture / lower-cased class-name stem → family.
struct Alias {
  std::string_view name;
  std::string_view family;
};
constexpr Alias kAliases[] = {
    {"llama", "llama"},     {"mistral", "mistral"}, {"qwen2", "qwen2"},   {"qwen3", "qwen3"},
    {"gemma", "gemma"},     {"gemma2", "gemma2"},   {"phi3", "phi3"},     {"gpt2", "gpt2"},
    {"mixtral", "mixtral"}, {"gemma3", "gemma3"},   {"gemma3_text", "gemma3"},
    // class names: LlamaForCausalLM → "llama", GPT2LMHeadModel → "gpt2"
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::span<const ArchEntry> arch_table() { return kTable; }

std::string_view role_name(Role r) {
  static constexpr std::string_view kNames[kRoleCount] = {
      "none",   "embed",  "final_norm", "head",    "rope_freqs", "attn_norm", "q",        "k",
      "v",      "o",      "q_bias",     "k_bias",  "v_bias",     "o_bias",    "q_norm",   "k_norm",
      "ffn_norm", "gate", "up",         "down",    "gate_bias",  "up_bias",   "down_bias",
      "post_attn_norm", "post_ffn_norm", "qkv", "gate_up",
      "router", "expert_gate", "expert_up", "expert_down", "expert_gate_up",
      "shared_gate", "shared_up", "shared_down", "shared_expert_gate",
      "sinks", "router_bias", "expert_gate_up_mixed", "expert_gate_up_bias", "expert_down_bias",
      "expert_gate_up_scales", "expert_down_scales"};
  return kNames[size_t(r)];
}

namespace {

Role role_in(Rules rules, std::string_view rest) {
  for (const auto& r : rules)
    if (r.role != Role::None && match_rule(r.name, rest)) return r.role;
  return Role::None;
}

// The tensor's name relative to a module named `prefix` ("" when it is not inside it).
std::optional<std::string_view> inside(std::string_view tensor, std::string_view prefix) {
  if (tensor.size() <= prefix.size() + 1 || !tensor.starts_with(prefix) || tensor[prefix.size()] != '.')
    return std::nullopt;
  return tensor.substr(prefix.size() + 1);
}

}  // namespace

Role tensor_role(std::string_view family, const Module& m, std::string_view tensor_name, Naming* naming) {
  auto rest = inside(tensor_name, m.name);
  if (!rest) return Role::None;
  auto found = [naming](const ArchEntry& e, Role r) {
    if (naming) *naming = e.naming;
    return r;
  };
  for (const ArchEntry& e : kTable) {
    if (e.family != family) continue;
    for (std::string_view root : e.roots) {
      if (m.kind == ModuleKind::Layer) {
        const std::string stack = std::string(root) + std::string(e.layers);
        if (!m.name.starts_with(stack) || m.name != stack + std::to_string(m.layer)) continue;
        for (const LayerSlot& slot : e.layer)
          for (Rules alt : slot.alternatives)
            if (Role r = role_in(alt, *rest); r != Role::None) return found(e, r);
      } else {
        for (const GlobalModule& g : e.globals) {
          const std::string full = g.under_root ? std::string(root) + std::string(g.name) : std::string(g.name);
          if (g.kind == m.kind && m.name == full)
            if (Role r = role_in(g.tensors, *rest); r != Role::None) return found(e, r);
        }
      }
    }
  }
  return Role::None;
}

std::optional<std::string> tensor_name_for(std::string_view family, Naming naming, ModuleKind kind, int64_t layer,
                                           Role r) {
  if (r == Role::None) return std::nullopt;
  for (const ArchEntry& e : kTable) {
    if (e.family != family || e.naming != naming) continue;
    const std::string root(e.roots.front());
    if (kind == ModuleKind::Layer) {
      for (const LayerSlot& slot : e.layer)
        for (Rules alt : slot.alternatives)
          for (const TensorRule& t : alt)
            if (t.role == r) return root + std::string(e.layers) + std::to_string(layer) + "." + std::string(t.name);
    } else {
      for (const GlobalModule& g : e.globals)
        if (g.kind == kind)
          for (const TensorRule& t : g.tensors)
            if (t.role == r) return (g.under_root ? root : std::string()) + std::string(g.name) + "." + std::string(t.name);
    }
  }
  return std::nullopt;
}

void assign_roles(const Checkpoint& ck, ModelLayout& layout) {
  const std::string family = layout.spec ? layout.spec->architecture : "";
  for (Module& m : layout.modules) {
    m.roles.assign(m.tensors.size(), Role::None);
    if (family.empty()) continue;
    for (size_t i = 0; i < m.tensors.size(); ++i)
      m.roles[i] = tensor_role(family, m, ck.tensors[m.tensors[i]].name, &layout.naming);
  }
}

bool is_known_family(std::string_view family) {
  return std::any_of(std::begin(kTable), std::end(kTable),
                     [&](const ArchEntry& e) { return e.family == family; });
}

std::string canonical_family(std::string_view name) {
  std::string n = lower(name);
  // Class names: strip the head suffix ("ForCausalLM", "LMHeadModel", "Model", ...).
  for (std::string_view suffix : {"forcausallm", "lmheadmodel", "forconditionalgeneration",
                                  "forsequenceclassification", "model"}) {
    if (n.size() > suffix.size() && n.ends_with(suffix)) {
      n.resize(n.size() - suffix.size());
      break;
    }
  }
  for (const auto& a : kAliases)
    if (a.name == n) return std::string(a.family);
  return "";
}

std::optional<std::vector<int64_t>> eval_shape(std::string_view shape, const ModelSpec& s) {
  if (shape == "*") return std::nullopt;
  const int64_t q = s.num_heads * s.head_dim, kv = s.num_kv_heads * s.head_dim;
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < shape.size()) {
    size_t j = shape.find(' ', i);
    if (j == std::string_view::npos) j = shape.size();
    std::string_view sym = shape.substr(i, j - i);
    i = j + 1;
    int64_t v = 0;
    if (sym == "H") v = s.hidden_size;
    else if (sym == "I") v = s.intermediate_size;
    else if (sym == "2I") v = 2 * s.intermediate_size;
    else if (sym == "V") v = s.vocab_size;
    else if (sym == "CTX") v = s.max_context;
    else if (sym == "HD") v = s.head_dim;
    else if (sym == "Q") v = q;
    else if (sym == "KV") v = kv;
    else if (sym == "QKV") v = (s.num_heads && s.num_kv_heads && s.head_dim) ? q + 2 * kv : 0;
    else if (sym == "3H") v = 3 * s.hidden_size;
    else if (sym == "E") v = s.num_experts;
    else if (sym == "1") v = 1;
    else if (sym == "EI") v = s.moe_intermediate_size;
    else if (sym == "2EI") v = 2 * s.moe_intermediate_size;
    else if (sym == "SI") v = s.shared_expert_intermediate_size;
    out.push_back(v);
  }
  return out;
}

bool match_rule(std::string_view rule, std::string_view name, int64_t* expert) {
  size_t hash = rule.find('#');
  if (hash == std::string_view::npos) {
    if (expert) *expert = -1;
    return rule == name;
  }
  std::string_view pre = rule.substr(0, hash), post = rule.substr(hash + 1);
  if (name.size() < pre.size() + post.size() + 1 || !name.starts_with(pre) || !name.ends_with(post))
    return false;
  std::string_view digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.empty() || digits.size() > 9) return false;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (expert) *expert = v;
  return true;
}

std::optional<LayerPath> layer_path(std::string_view name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) break;
    std::string_view word = name.substr(start, dot - start);
    if (word == "layers" || word == "block" || word == "h" || word == "blocks" || word == "blk" || word == "layer" ||
        word == "transformer_blocks" || word == "single_transformer_blocks") {
      size_t end = dot + 1;
      int64_t v = 0;
      while (end < name.size() && name[end] >= '0' && name[end] <= '9' && end - dot <= 9) {
        v = v * 10 + (name[end] - '0');
        ++end;
      }
      // "N" must be a whole component followed by more path ("layers.3.attn"), not "layers.3"
      // alone nor "layers.3x".
      if (end > dot + 1 && end < name.size() && name[end] == '.')
        return LayerPath{std::string(name.substr(0, end)), v};
    }
    start = dot + 1;
  }
  return std::nullopt;
}

std::string module_of(std::string_view name) {
  size_t dot = name.rfind('.');
  return std::string(dot == std::string_view::npos ? name : name.substr(0, dot));
}

ModuleKind guess_global_kind(std::string_view module) {
  size_t dot = module.rfind('.');
  std::string_view last = dot == std::string_view::npos ? module : module.substr(dot + 1);
  for (std::string_view e : {"embed_tokens", "wte", "wpe", "token_embd", "position_embd", "tok_embeddings",
                             "word_embeddings", "embed_in"})
    if (last == e) return ModuleKind::Embedding;
  for (std::string_view e : {"norm", "ln_f", "output_norm", "final_layernorm", "final_layer_norm",
                             "final_norm"})
    if (last == e) return ModuleKind::FinalNorm;
  for (std::string_view e : {"lm_head", "output", "embed_out"})
    if (last == e) return ModuleKind::Head;
  return ModuleKind::Other;
}

}  // namespace nunchaku
