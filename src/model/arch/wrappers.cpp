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

// Image tokens in the context (transformers 5.25 processors): the wrapper's fixed count where
// it has one, else the largest count an image can take, from the vision config.
void llava(const ConfigFields& f, ModelSpec& s) { s.image_tokens = f.integer({"image_seq_length"}).value_or(576); }
void gemma3(const ConfigFields& f, ModelSpec& s) { s.image_tokens = f.integer({"mm_tokens_per_image"}).value_or(256); }

// vision_config.<key> (the top-level config's vision tower), else `fallback`.
int64_t vision_int(const ConfigFields& f, std::string_view key, int64_t fallback) {
  const nlohmann::json* v = f.find({"vision_config"});
  if (!v || !v->is_object()) return fallback;
  auto it = v->find(std::string(key));
  return it == v->end() || it->is_null() ? fallback : f.to_int(*it, "vision_config." + std::string(key));
}

void at_most(ModelSpec& s, int64_t tokens) {
  s.image_tokens = tokens;
  s.image_tokens_at_most = true;
}

// Pixtral (processing_pixtral.py): an image resized to fit image_size, in tiles of
// patch_size x spatial_merge_size: h rows of w [IMG] tokens, each row ending in [IMG_BREAK]
// (the last in [IMG_END]): h * (w + 1), at most (image_size / tile)^2 + image_size / tile.
void mistral3(const ConfigFields& f, ModelSpec& s) {
  const int64_t tile = vision_int(f, "patch_size", 14) * f.integer({"spatial_merge_size"}).value_or(2);
  const int64_t side = tile > 0 ? vision_int(f, "image_size", 1540) / tile : 0;
  at_most(s, side * (side + 1));
}

// Qwen2-VL (processing_qwen2_vl.py): one <|image_pad|> per merge_size^2 patches of 14 x 14
// pixels, the image resized to at most max_pixels; 12845056 in the published Qwen2-VL and
// Qwen2.5-VL preprocessor_config.json (transformers' class default is 28 * 28 * 1280).
void qwen2_vl(const ConfigFields& f, ModelSpec& s) {
  const int64_t patch = vision_int(f, "patch_size", 14), merge = vision_int(f, "spatial_merge_size", 2);
  const int64_t pixels_per_token = patch * patch * merge * merge;
  at_most(s, pixels_per_token > 0 ? int64_t{12845056} / pixels_per_token : 0);
}

// Llama 4 (processing_llama4.py, image_processing_llama4.py max_patches 16): an image of
// t tiles (t > 1) takes <|image_start|>, t tiles of n patch tokens with one separator each,
// <|image|>, the global tile's n tokens and <|image_end|>: 3 + (t + 1) n + t, where
// n = (image_size / patch_size)^2 * pixel_shuffle_ratio^2 (144 for Scout and Maverick).
void llama4(const ConfigFields& f, ModelSpec& s) {
  const int64_t patch = vision_int(f, "patch_size", 14);
  const int64_t side = patch > 0 ? vision_int(f, "image_size", 336) / patch : 0;
  double ratio = 0.5;
  if (const nlohmann::json* v = f.find({"vision_config"}); v && v->is_object())
    if (auto it = v->find("pixel_shuffle_ratio"); it != v->end() && it->is_number() && it->get<double>() > 0 && it->get<double>() <= 1)
      ratio = it->get<double>();
  const auto n = static_cast<int64_t>(double(side * side) * ratio * ratio);
  constexpr int64_t kTiles = 16;
  at_most(s, 3 + (kTiles + 1) * n + kTiles);
}

}  // namespace

extern const ArchRecord kLlavaWrap{.family = "llava", .wrapper = true, .names = kLlavaNames,
                            .hf_class = "LlavaForConditionalGeneration", .text_family = "llama",
                            .components = kLlavaParts, .to_transformers = kLlavaRenames, .hf_config = llava};
extern const ArchRecord kMistral3Wrap{.family = "mistral3", .wrapper = true, .names = kMistral3Names,
                               .hf_class = "Mistral3ForConditionalGeneration", .text_family = "mistral",
                               .components = kLlavaParts, .to_transformers = kLlavaRenames, .hf_config = mistral3};
extern const ArchRecord kGemma3Wrap{.family = "gemma3", .wrapper = true, .names = kGemma3Names,
                             .hf_class = "Gemma3ForConditionalGeneration", .text_family = "gemma3",
                             .components = kLlavaParts, .to_transformers = kLlavaRenames, .hf_config = gemma3};
extern const ArchRecord kQwen2VlWrap{.family = "qwen2_vl", .wrapper = true, .names = kQwenVlNames,
                              .hf_class = "Qwen2VLForConditionalGeneration", .text_family = "qwen2",
                              .components = kQwenVlParts, .to_transformers = kQwenVlRenames, .hf_config = qwen2_vl};
extern const ArchRecord kLlama4Wrap{.family = "llama4", .wrapper = true, .names = kLlama4Names,
                             .hf_class = "Llama4ForConditionalGeneration", .text_family = "llama4",
                             .components = kLlama4Parts, .to_transformers = kLlavaRenames, .hf_config = llama4};

}  // namespace nunchaku::arch
