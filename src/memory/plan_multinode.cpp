// vLLM over several nodes: per-stage charges, what fits, the launch lines (plan_multinode.hpp).
#include "memory/plan_multinode.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/units.hpp"
#include "memory/estimate_detail.hpp"
#include "memory/plan_export.hpp"

namespace nunchaku {
namespace {

constexpr int64_t kBlock = 16;  // vLLM's CacheConfig block size (CUDA)

// KV bytes per token per rank of one stage: its layers holding every token, over TP.
uint64_t stage_kv_per_token(const Estimate& e, const PipelineStage& st, int tp) {
  uint64_t b = 0;
  for (int64_t l = st.first_layer; l < st.first_layer + st.num_layers; ++l)
    b = estimate_detail::add(b, kv_layer_bytes(e.spec, l, kBlock, 1, e.kv_dtype));
  const int64_t kvh = e.spec.num_kv_heads > 0 ? e.spec.num_kv_heads : e.spec.num_heads;
  const uint64_t split = e.spec.kv_lora_rank > 0 ? 1 : uint64_t(std::max<int64_t>(1, std::min<int64_t>(tp, kvh)));
  return b / split / kBlock;
}

std::string quoted(const std::string& s) {
  if (s.find_first_of(" '\"$\\") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void launch_lines(VllmCluster& c, const std::string& model, int pp) {
  const std::string serve = fmt::format("vllm serve {} {}", quoted(model), c.engine_args);
  c.ray_lines.push_back("# node 0 (head): ray start --head --port=6379");
  const auto workers = pp <= 8 ? pp - 1 : 1;
  for (int k = 1; k <= workers; ++k)
    c.ray_lines.push_back(fmt::format("# node {}: ray start --address=$HEAD_NODE_IP:6379", pp <= 8 ? std::to_string(k) : "1.." + std::to_string(pp - 1)));
  c.ray_lines.push_back(fmt::format("# node 0, once `ray status` shows {} GPUs:", c.tensor_parallel * pp));
  c.ray_lines.push_back(serve + " --distributed-executor-backend ray");
  c.mp_lines.push_back("# node 0 (head, serves the API):");
  c.mp_lines.push_back(fmt::format("{} --nnodes {} --node-rank 0 --master-addr $HEAD_NODE_IP", serve, pp));
  for (int k = 1; k <= workers; ++k) {
    const std::string rank = pp <= 8 ? std::to_string(k) : "$NODE_RANK";
    c.mp_lines.push_back(fmt::format("# node {}:", pp <= 8 ? std::to_string(k) : "1.." + std::to_string(pp - 1) + " (NODE_RANK)"));
    c.mp_lines.push_back(fmt::format("{} --nnodes {} --node-rank {} --master-addr $HEAD_NODE_IP --headless", serve, pp, rank));
  }
}

}  // namespace

VllmCluster vllm_cluster(const Estimate& e, uint64_t vram, const std::vector<uint64_t>& device_total, const std::string& model,
                         const std::function<bool(int)>& nodes_fit) {
  VllmCluster c;
  const Workload& w = e.workload;
  c.tensor_parallel = std::max(1, w.gpus);
  c.pipeline_parallel = std::max(1, w.nodes);
  c.max_model_len = export_context(e.spec, w.context, Runtime::Vllm, c.notes);
  c.budget = verdict(e, vram).budget;
  const std::vector<PipelineStage> stages = vllm_stages(e, c.tensor_parallel, c.pipeline_parallel);
  // Everything a rank holds but its stage's weights and KV (activations, logits, overheads).
  const uint64_t rest = e.per_gpu_total - e.component("weights") - e.component("kv_cache");
  uint64_t worst_short = 0;
  c.largest_max_model_len = INT64_MAX;
  c.largest_max_num_seqs = INT64_MAX;
  for (const auto& st : stages) {
    VllmStageCharge s{st, rest + st.weight_bytes + st.kv_bytes, 0, 0};
    const uint64_t fixed = rest + st.weight_bytes;
    s.kv_capacity = c.budget > fixed ? c.budget - fixed : 0;
    const uint64_t per_token = std::max<uint64_t>(1, stage_kv_per_token(e, st, c.tensor_parallel));
    s.kv_tokens = int64_t(s.kv_capacity / per_token / kBlock * kBlock);
    if (s.rank_total > c.budget) worst_short = std::max(worst_short, s.rank_total - c.budget);
    c.largest_max_model_len = std::min(c.largest_max_model_len, s.kv_tokens - kBlock);  // + the pool's null block
    const int64_t seq_tokens = (c.max_model_len + kBlock - 1) / kBlock * kBlock;
    c.largest_max_num_seqs = std::min(c.largest_max_num_seqs, seq_tokens > 0 ? s.kv_tokens / seq_tokens : 0);
    c.stages.push_back(s);
  }
  c.largest_max_model_len = std::max<int64_t>(0, std::min<int64_t>(c.largest_max_model_len, e.spec.max_context > 0 ? e.spec.max_context : INT64_MAX));
  c.largest_max_num_seqs = std::max<int64_t>(0, c.largest_max_num_seqs);
  c.fits = worst_short == 0;
  VllmArgs offload;  // plan_export's: the routed experts of each stage's first layers when they cover it
  offload.tensor_parallel = c.tensor_parallel, offload.pipeline_parallel = c.pipeline_parallel;
  vllm_offload(e, worst_short, offload);
  c.cpu_offload_gb = offload.cpu_offload_gb;
  c.offload_flags = offload.command.empty() ? "" : offload.command.substr(1);
  if (!device_total.empty() && device_total.front() > 0) {
    const uint64_t share = vram > e.outside_budget ? vram - e.outside_budget : 0;
    c.gpu_memory_utilization = std::min(0.99, std::floor(double(share) / double(device_total.front()) * 100) / 100);
  }
  for (int n = 1; n <= 64 && c.fewest_nodes == 0; n *= 2)
    if (n <= e.spec.num_layers && nodes_fit(n)) c.fewest_nodes = n;
  c.engine_args = fmt::format("--tensor-parallel-size {} --pipeline-parallel-size {} --max-model-len {} --gpu-memory-utilization {:.2f} "
                              "--max-num-batched-tokens {} --max-num-seqs {}",
                              c.tensor_parallel, c.pipeline_parallel, c.max_model_len, c.gpu_memory_utilization,
                              kVllmMaxNumBatchedTokens, kVllmMaxNumSeqs);
  c.engine_args += offload.command;
  c.notes.insert(c.notes.end(), offload.notes.begin(), offload.notes.end());
  launch_lines(c, model, c.pipeline_parallel);
  c.notes.push_back(fmt::format("tensor parallel {} within each node, pipeline parallel {} across nodes (vLLM's advice for nodes "
                                "of {} GPUs); layers per node {}", c.tensor_parallel, c.pipeline_parallel, c.tensor_parallel,
                                fmt::join(vllm_pp_partition(e.spec.num_layers, c.pipeline_parallel), "/")));
  c.notes.push_back(fmt::format("at --max-model-len {}: room for {} such sequences at once; the longest --max-model-len one "
                                "sequence fits is {}", c.max_model_len, c.largest_max_num_seqs, c.largest_max_model_len));
  if (c.fewest_nodes > 0 && c.fewest_nodes < c.pipeline_parallel)
    c.notes.push_back(fmt::format("{} of {} GPUs would hold it (--nodes {})", plural(uint64_t(c.fewest_nodes), "node"),
                                  c.tensor_parallel, c.fewest_nodes));
  else if (c.fewest_nodes > c.pipeline_parallel)
    c.notes.push_back(fmt::format("the fewest nodes of {} GPUs that hold it without CPU offload: {} (--nodes {})", c.tensor_parallel,
                                  c.fewest_nodes, c.fewest_nodes));
  else if (c.fewest_nodes == 0)
    c.notes.push_back(fmt::format("no count of nodes of {} GPUs up to 64 holds it without CPU offload", c.tensor_parallel));
  c.notes.push_back("set HEAD_NODE_IP to node 0's address on every node; Ray (--distributed-executor-backend ray) or "
                    "vLLM's own multiprocessing (--nnodes/--node-rank/--master-addr, --headless on the others)");
  return c;
}

DeepSpeedLaunch deepspeed_launch(const Workload& w, const std::string& config_file, const std::string& hostfile_name) {
  DeepSpeedLaunch d;
  const int nodes = std::max(1, w.nodes), gpus = std::max(1, w.gpus);
  d.hostfile = "# DeepSpeed hostfile: one line per node, `HOST slots=GPUS`; replace node0.. with the names ssh reaches\n";
  for (int i = 0; i < nodes; ++i) d.hostfile += fmt::format("node{} slots={}\n", i, gpus);
  const std::string tail = fmt::format("--num_nodes {} --num_gpus {} train.py --deepspeed {}", nodes, gpus, config_file);
  d.lines.push_back(fmt::format("# from node0, which reaches the others by passwordless ssh (train.py: your script, taking "
                                "--deepspeed CONFIG):"));
  d.lines.push_back(fmt::format("deepspeed --hostfile {} --master_addr $MASTER_ADDR --master_port 29500 {}", hostfile_name, tail));
  d.lines.push_back(fmt::format("# or without ssh: on node K (0..{}), MASTER_ADDR = node0's address:", nodes - 1));
  d.lines.push_back(fmt::format("deepspeed --hostfile {} --no_ssh --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port 29500 {}",
                                hostfile_name, tail));
  return d;
}

}  // namespace nunchaku
