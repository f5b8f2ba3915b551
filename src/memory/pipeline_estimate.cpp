#include "memory/pipeline_estimate.hpp"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "format/open.hpp"
#include "memory/estimate_detail.hpp"
#include "model/model.hpp"

namespace nunchaku {
using estimate_detail::add;
using estimate_detail::elem_bytes;
using estimate_detail::mul;

namespace {

// The module a tensor belongs to: its name without the last component.
std::string_view leaf_of(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(0, dot);
}

PipelinePartCost part_cost(const PipelinePart& part, const Workload& w, uint64_t* fixed) {
  const Checkpoint ck = open_checkpoint(part.dir);
  const ModelLayout layout = describe_model(ck);
  const Estimate e = estimate_detail::estimate_weights_only(ck, layout, w);
  PipelinePartCost c;
  c.part = part;
  c.parameters = e.parameters;
  c.weight_bytes = e.component("weights");
  c.tensors = static_cast<int64_t>(ck.tensors.size());
  *fixed = std::max(*fixed, e.per_gpu_total - c.weight_bytes);
  std::unordered_map<std::string_view, uint64_t> leaf;
  leaf.reserve(ck.tensors.size());
  for (const TensorInfo& t : ck.tensors) {
    const bool convert = w.dtype.has_value() && dtype_info(t.dtype).kind == DTypeKind::Float;
    uint64_t& b = leaf[leaf_of(t.name)];
    b = add(b, convert ? mul({t.numel(), elem_bytes(*w.dtype)}) : t.nbytes);
    if (b > c.largest_leaf_bytes) c.largest_leaf_bytes = b, c.largest_leaf = std::string(leaf_of(t.name));
  }
  return c;
}

}  // namespace

PipelineEstimate estimate_pipeline(const Pipeline& p, const Workload& w) {
  if (w.images > 0) throw Error("usage.images", "--images is for multimodal language models, not a diffusers pipeline");
  if (w.runtime && *w.runtime != Runtime::Transformers)
    throw Error("usage.pipeline", fmt::format("a diffusers pipeline runs on PyTorch (diffusers); --runtime {} does not load it",
                                              runtime_name(*w.runtime)),
                {.hint = "leave --runtime out (or --runtime transformers)"});
  if (w.quant.scheme != QuantScheme::None)
    throw Error("usage.pipeline", "--quant is modelled for language models; a pipeline's parts convert with --dtype",
                {.hint = "e.g. --dtype fp8"});
  if (w.nodes != 1 || w.gpus != 1)
    throw Error("usage.pipeline", "a diffusers pipeline is estimated on one GPU", {.hint = "leave --gpus and --nodes out"});
  PipelineEstimate e;
  e.pipeline = p;
  for (const PipelinePart& part : p.parts) {
    e.parts.push_back(part_cost(part, w, &e.fixed_bytes));
    e.parameters += e.parts.back().parameters;
    e.weight_bytes = add(e.weight_bytes, e.parts.back().weight_bytes);
  }
  auto largest = [&](auto field) {
    return std::max_element(e.parts.begin(), e.parts.end(), [&](const auto& a, const auto& b) { return a.*field < b.*field; });
  };
  const auto big = largest(&PipelinePartCost::weight_bytes);
  const auto leaf = largest(&PipelinePartCost::largest_leaf_bytes);
  e.placements.push_back({"every part on the GPU", "pipe.to(\"cuda\")", add(e.weight_bytes, e.fixed_bytes), 0});
  e.placements.push_back({fmt::format("one part at a time (largest: {})", big->part.name), "pipe.enable_model_cpu_offload()",
                          add(big->weight_bytes, e.fixed_bytes), e.weight_bytes});
  e.placements.push_back({fmt::format("one module at a time (largest: {}.{})", leaf->part.name, leaf->largest_leaf),
                          "pipe.enable_sequential_cpu_offload()", add(leaf->largest_leaf_bytes, e.fixed_bytes), e.weight_bytes});
  e.guessed.push_back("activations: the denoiser's grow with the image resolution and the text encoders' with the prompt; "
                      "not modelled");
  for (const auto& n : p.no_weights) e.notes.push_back(fmt::format("{}: no weights (nothing to place)", n));
  e.notes.push_back(fmt::format("fixed costs once: {} (CUDA context, cuBLAS workspace; --overhead NAME=SIZE)", format_bytes(e.fixed_bytes)));
  return e;
}

int first_fitting(const PipelineEstimate& e, uint64_t vram) {
  for (size_t i = 0; i < e.placements.size(); ++i)
    if (e.placements[i].gpu_bytes <= vram) return static_cast<int>(i);
  return -1;
}

nlohmann::json to_json(const PipelineEstimate& e, uint64_t vram) {
  using nlohmann::json;
  json parts = json::array();
  for (const auto& c : e.parts)
    parts.push_back({{"name", c.part.name}, {"library", c.part.library}, {"class_name", c.part.class_name},
                     {"num_parameters", c.parameters}, {"weight_bytes", c.weight_bytes}, {"num_tensors", c.tensors},
                     {"largest_module", c.largest_leaf}, {"largest_module_bytes", c.largest_leaf_bytes}});
  json places = json::array();
  for (const auto& p : e.placements)
    places.push_back({{"name", p.name}, {"call", p.call}, {"gpu_bytes", p.gpu_bytes}, {"host_bytes", p.host_bytes},
                      {"fits", vram > 0 ? json(p.gpu_bytes <= vram) : json(nullptr)}});
  json verdict = nullptr;
  if (vram > 0) {
    const int i = first_fitting(e, vram);
    verdict = {{"vram_bytes", vram},
               {"fits", i >= 0},
               // the shared vocabulary: the first placement keeps every part on the GPU, the others offload
               {"status", i < 0 ? "oom" : i == 0 ? "fits" : "fits_with_offload"},
               {"placement", i >= 0 ? json(e.placements[size_t(i)].call) : json(nullptr)},
               {"headroom_bytes", i >= 0 ? int64_t(vram - e.placements[size_t(i)].gpu_bytes)
                                         : -int64_t(e.placements.back().gpu_bytes - vram)},
               {"confirmed", false}};
  }
  return {{"pipeline", e.pipeline.class_name.empty() ? json(nullptr) : json(e.pipeline.class_name)},
          {"parts", parts}, {"num_parameters", e.parameters}, {"weight_bytes", e.weight_bytes},
          {"fixed_bytes", e.fixed_bytes}, {"placements", places}, {"verdict", verdict},
          {"guessed", e.guessed}, {"notes", e.notes}, {"no_weights", e.pipeline.no_weights}};
}

}  // namespace nunchaku
