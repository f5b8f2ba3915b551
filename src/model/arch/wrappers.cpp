// Multimodal wrappers: where the language model sits and which other components a
// checkpoint holds, under transformers 5's module names and the Hub's older checkpoint
// names (both are read; accelerate maps are written in transformers 5's names). The
// language model is described by its text record (text_config.model_type).
#include "model/arch/record.hpp"

namespace nunchaku::arch {
namespace {

constexpr ArchComponent kLlavaParts[] = {{"model.vision_tower.", "vision_tower"},
                                     {"vision_tower.", "vision_tower"},
                                     {"model.multi_modal_projector.", "projector"},
                                     {"multi_modal_projector.", "projector"}};
constexpr ArchComponent kQwenVlParts[] = {{"model.visual.", "vision_tower"}, {"visual.", "vision_tower"}};
constexpr ArchComponent kLlama4Parts[] = {{"model.vision_model.", "vision_tower"},
                                      {"vision_model.", "vision_tower"},
                                      {"model.multi_modal_projector.", "projector"},
                                      {"multi_modal_projector.", "projector"}};

// transformers 5 conversion_mapping.py ("llava" rules, shared by gemma3, mistral3 and others;
// qwen2_vl's own rules). Identity rules first so that new names stay as they are.
constexpr Rename kLlavaRenames[] = {{"model.", "model."},
                                    {"lm_head.", "lm_head."},
                                    {"language_model.lm_head.", "lm_head."},
                                    {"language_model.model.", "model.language_model."},
                                    {"language_model.", "model.language_model."},
                                    {"vision_tower.", "model.vision_tower."},
                                    {"vision_model.", "model.vision_model."},
                                    {"multi_modal_projector.", "model.multi_modal_projector."}};
constexpr Rename kQwenVlRenames[] = {{"model.language_model.", "model.language_model."},
                                     {"model.visual.", "model.visual."},
                                     {"visual.", "model.visual."},
                                     {"model.", "model.language_model."}};

constexpr std::string_view kLlavaNames[] = {"llava", "llava_next", "llava_onevision", "vipllava"};
constexpr std::string_view kMistral3Names[] = {"mistral3"};
constexpr std::string_view kGemma3Names[] = {"gemma3"};
constexpr std::string_view kQwenVlNames[] = {"qwen2_vl", "qwen2_5_vl", "qwen2vl", "qwen2_5_vl"};
constexpr std::string_view kLlama4Names[] = {"llama4"};

// Image tokens in the context: the wrapper's fixed count where it has one.
void llava(const ConfigFields& f, ModelSpec& s) { s.image_tokens = f.integer({"image_seq_length"}).value_or(576); }
void gemma3(const ConfigFields& f, ModelSpec& s) { s.image_tokens = f.integer({"mm_tokens_per_image"}).value_or(256); }

}  // namespace

extern const ArchRecord kLlavaWrap{.family = "llava", .wrapper = true, .names = kLlavaNames,
                            .hf_class = "LlavaForConditionalGeneration", .text_family = "llama",
                            .components = kLlavaParts, .to_transformers = kLlavaRenames, .hf_config = llava};
extern const ArchRecord kMistral3Wrap{.family = "mistral3", .wrapper = true, .names = kMistral3Names,
                               .hf_class = "Mistral3ForConditionalGeneration", .text_family = "mistral",
                               .components = kLlavaParts, .to_transformers = kLlavaRenames};
extern const ArchRecord kGemma3Wrap{.family = "gemma3", .wrapper = true, .names = kGemma3Names,
                             .hf_class = "Gemma3ForConditionalGeneration", .text_family = "gemma3",
                             .components = kLlavaParts, .to_transformers = kLlavaRenames, .hf_config = gemma3};
extern const ArchRecord kQwen2VlWrap{.family = "qwen2_vl", .wrapper = true, .names = kQwenVlNames,
                              .hf_class = "Qwen2VLForConditionalGeneration", .text_family = "qwen2",
                              .components = kQwenVlParts, .to_transformers = kQwenVlRenames};
extern const ArchRecord kLlama4Wrap{.family = "llama4", .wrapper = true, .names = kLlama4Names,
                             .hf_class = "Llama4ForConditionalGeneration", .text_family = "llama4",
                             .components = kLlama4Parts, .to_transformers = kLlavaRenames};

}  // namespace nunchaku::arch
