// accelerate's config.yaml for FSDP2 over nodes (plan_fsdp.hpp). The keys are those of
// accelerate 1.16's ClusterConfig and of its launcher's --fsdp_* / --parallelism_config_*
// arguments (accelerate/commands/launch.py, _validate_launch_command copies fsdp_config.x to
// args.x and parallelism_config.x to args.x); scripts/check_fsdp_exports.py reads the files
// with accelerate's own code.
#include "memory/plan_fsdp.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/units.hpp"
#include "memory/estimate.hpp"
#include "memory/fsdp.hpp"
#include "memory/multinode.hpp"

namespace nunchaku {
namespace {

std::string yaml_text(const Estimate& e) {
  const Workload& w = e.workload;
  const int nodes = std::max(1, w.nodes), gpus = std::max(1, w.gpus);
  const bool hybrid = w.fsdp == FsdpStrategy::Hybrid && nodes > 1;
  const std::string mp = e.compute_dtype == DType::BF16 ? "bf16" : e.compute_dtype == DType::F16 ? "fp16" : "'no'";
  std::string y = fmt::format(
      "# accelerate config: PyTorch FSDP2, {}, from nunchaku plan --format fsdp.\n"
      "# The same file on every node; each node runs accelerate launch --config_file with its own\n"
      "# --machine_rank (0 on the node that main_process_ip names) and --main_process_ip.\n",
      fsdp_layout_text(w));
  y += "compute_environment: LOCAL_MACHINE\n"
       "debug: false\n"
       "distributed_type: FSDP\n"
       "downcast_bf16: 'no'\n"
       "enable_cpu_affinity: false\n"
       "fsdp_config:\n";
  y += fmt::format("  fsdp_activation_checkpointing: {}\n", w.grad_checkpointing ? "true" : "false");
  y += "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
       "  fsdp_cpu_ram_efficient_loading: true\n";
  y += fmt::format("  fsdp_offload_params: {}\n", w.offload == Offload::None ? "false" : "true");
  y += "  fsdp_reshard_after_forward: true\n"
       "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
       "  fsdp_version: 2\n";
  y += "machine_rank: 0  # each node sets its own: --machine_rank K on node K\n";
  y += "main_process_ip: node0  # placeholder: node 0's address, reachable from every node\n"
       "main_process_port: 29500\n"
       "main_training_function: main\n";
  y += fmt::format("mixed_precision: {}\n", mp);
  y += fmt::format("num_machines: {}\n", nodes);
  y += fmt::format("num_processes: {}  # every GPU of every node ({} × {})\n", nodes * gpus, nodes, gpus);
  if (hybrid)
    y += fmt::format("parallelism_config:  # hybrid shard: shard over a node's GPUs, replicate over the nodes\n"
                     "  parallelism_config_dp_replicate_size: {}\n"
                     "  parallelism_config_dp_shard_size: {}\n",
                     nodes, gpus);
  y += "rdzv_backend: static\n"
       "same_network: true\n"
       "tpu_env: []\n"
       "tpu_use_cluster: false\n"
       "tpu_use_sudo: false\n"
       "use_cpu: false\n";
  return y;
}

}  // namespace

FsdpExport fsdp_accelerate_config(const Checkpoint& ck, const ModelLayout& layout, const Workload& w, uint64_t vram,
                                  const std::string& config_file) {
  if (w.mode == Mode::Infer)
    throw Error("usage.format", "--format fsdp writes an accelerate config for FSDP training; it needs --mode train, lora or qlora",
                {.hint = "for inference: --format accelerate, llama.cpp or vllm"});
  std::vector<std::pair<FsdpStrategy, Offload>> order;
  for (Offload off : {Offload::None, Offload::Params}) {
    if (w.offload != Offload::None && off == Offload::None) continue;  // not below what was asked
    if (w.fsdp == FsdpStrategy::Hybrid) order.push_back({FsdpStrategy::Hybrid, off});
    order.push_back({FsdpStrategy::Full, off});
  }
  FsdpExport x;
  const EstimateBasis basis = estimate_basis(ck, layout);
  for (const auto& [strategy, off] : order) {
    Workload t = w;
    t.runtime = Runtime::Fsdp;
    t.fsdp = strategy;
    t.offload = off;
    const Estimate e = estimate(ck, layout, t, basis);
    x.fits = e.per_gpu_total <= vram;
    x.strategy = strategy;
    x.offload = off;
    x.per_gpu_total = e.per_gpu_total;
    x.host_total = e.host_total;
    x.why = rank_breakdown(e);
    x.yaml = yaml_text(e);
    if (x.fits) break;
  }
  Workload t = w;
  t.fsdp = x.strategy;
  const int nodes = std::max(1, w.nodes);
  if (nodes == 1)
    x.lines = {"# one machine (train.py: your script, using accelerate's Accelerator):",
               fmt::format("accelerate launch --config_file {} train.py", config_file)};
  else
    x.lines = {fmt::format("# on node K (0..{}): MACHINE_RANK=K, MAIN_PROCESS_IP = node 0's address (train.py: your script, "
                           "using accelerate's Accelerator)", nodes - 1),
               fmt::format("accelerate launch --config_file {} --machine_rank $MACHINE_RANK --main_process_ip $MAIN_PROCESS_IP "
                           "--main_process_port 29500 train.py",
                           config_file)};
  for (const auto& l : x.lines) x.launch += l + "\n";
  x.notes.push_back(fmt::format("{}{}: {} per GPU ({}){}", fsdp_layout_text(t),
                                x.offload == Offload::None ? "" : ", CPU offload (params, gradients, optimizer)",
                                format_bytes(x.per_gpu_total), x.fits ? "fits" : "does NOT fit even so",
                                x.host_total > 0 ? fmt::format("; host memory per node {}", format_bytes(x.host_total)) : ""));
  x.notes.push_back("fsdp_cpu_ram_efficient_loading: rank 0 reads the checkpoint into host memory once and the others "
                    "receive their shards (node 0's host needs the whole checkpoint during loading)");
  if (w.grad_checkpointing)
    x.notes.push_back("fsdp_activation_checkpointing: true checkpoints every decoder layer (do not also call "
                      "gradient_checkpointing_enable() in the script)");
  return x;
}

}  // namespace nunchaku
