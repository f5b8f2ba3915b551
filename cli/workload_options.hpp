// The workload options shared by `estimate` and `plan` (the same flag means the same
// thing in both), and --vram parsing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "memory/workload.hpp"

namespace nunchaku::cli {

struct WorkloadOptions {
  std::string mode = "infer", dtype, kv_dtype, quant, optimizer = "adamw", offload = "none", lora_targets;
  std::string runtime, device = "cuda", attention = "default", interconnect, fsdp_strategy = "full";
  int64_t batch = 1, context = 0, prefill_chunk = 0, lora_rank = 16, ubatch = 0, steps = 0, images = 0, image_tokens = 0;
  int quant_bits = 4, group_size = 128, gpus = 0, nodes = 1, zero = 0, threads = 0;
  bool double_quant = false, grad_ckpt = false, flash = false, all_logits = false, swa_full = false, no_repack = false;
  std::vector<std::string> overheads;
};

// Registers --mode, --batch, --context, ..., --overhead on `cmd`.
void add_workload_options(CLI::App* cmd, WorkloadOptions& o);
// Throws Error usage.* (exit 2) on bad values. `n_vram`: the number of --vram sizes (GPU count default).
// --runtime all is not a Workload: callers loop over runtimes_for(mode) (see is_all_runtimes).
Workload to_workload(const WorkloadOptions& o, size_t n_vram);
// --interconnect: "400Gb" / "400Gbps" / "400Gbit" (bits per second, 10^9), or a size per
// second ("50GB", "50GB/s", "46.6G"), read by the one size parser. Bytes per second.
uint64_t parse_bandwidth(const std::string& s, const char* flag = "--interconnect");
bool is_all_runtimes(const WorkloadOptions& o);
// --gpus against --vram: one size and --gpus N means N GPUs of that size; several sizes
// must number N. Throws Error usage.gpus (exit 2) otherwise.
void match_gpus(std::vector<uint64_t>& vram, int gpus);
// --vram: "16G", "16G,24G" or "auto" (free memory of the CUDA devices now); empty when not
// given. A 0 is exit 2 (a verdict against no memory says nothing).
std::vector<uint64_t> parse_vram(const std::string& s);
// --vram for the planners (plan, load): "0" alone means no GPU (empty, with a note in
// `notes`); a 0 among other sizes is exit 2.
std::vector<uint64_t> parse_vram_for_plan(const std::string& s, std::vector<std::string>& notes);
std::vector<std::string> split(const std::string& s, char sep);

}  // namespace nunchaku::cli
