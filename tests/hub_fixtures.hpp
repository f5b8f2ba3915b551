// Helpers of the [hub] tests: a local HF cache laid out as huggingface_hub writes it, and
// the environment variables the Hub client reads, set for one test and restored after.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nunchaku::test {

// Sets / unsets variables for the life of the guard; every variable the Hub client reads is
// cleared first (HF_TOKEN, HF_HOME, HF_HUB_OFFLINE, proxies, ...), so the host's own
// settings never leak into a test.
class HubEnvGuard {
 public:
  HubEnvGuard();
  ~HubEnvGuard();
  HubEnvGuard(const HubEnvGuard&) = delete;
  HubEnvGuard& operator=(const HubEnvGuard&) = delete;
  void set(const std::string& name, const std::string& value);
  void unset(const std::string& name);

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
  void remember(const std::string& name);
};

// Puts the files of `src_dir` (a model folder) into `cache` as the snapshot `sha` of repo
// `id` (blobs/<hash>, snapshots/<sha>/<file> -> ../../blobs/<hash>), with refs/<ref> = sha
// for each of `refs`. Returns the snapshot folder.
std::string put_in_hf_cache(const std::string& cache, const std::string& id, const std::string& sha,
                            const std::string& src_dir, const std::vector<std::string>& refs = {"main"});

// A sparse Llama checkpoint in `n` safetensors shards (BF16) with its index and
// config.json; returns the exact parameter count written.
uint64_t write_sparse_sharded_llama(const std::string& dir, const std::string& config, int n);

}  // namespace nunchaku::test
