// Shared test helpers: paths to fixtures and real files, temp dirs, running the CLI.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nunchaku::test {

// <repo>/testdata/<rel>
std::string testdata(const std::string& rel);
// ../shared/testfiles/<rel> beside the repo; "" when the folder is absent.
std::string shared_testfile(const std::string& rel);
bool have_shared_testfiles();

// A fresh empty directory under the system temp dir, removed by the destructor.
struct TempDir {
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
// Parses a JSON file (golden files, expectations); a test failure when it cannot be read.
nlohmann::json read_json(const std::string& path);
// The whole file as bytes ("" when it cannot be read: the comparison that follows fails).
std::string read_text(const std::string& path);
void write_file(const std::string& path, const std::string& text);

// A Llama-shaped checkpoint at full scale that takes no disk: `config` (a config.json path)
// copied into `dir`, and one F16 model.safetensors with every tensor of that config, its
// data region a file hole (header written, then ftruncate).
void write_sparse_llama(const std::string& dir, const std::string& config);
// The tensors (name, shape) of a Llama-shaped model with that config.json.
std::vector<std::pair<std::string, std::vector<int64_t>>> llama_tensors(const nlohmann::json& config);
// A safetensors file with `header` (data_offsets already set) whose data region of
// `data_bytes` is a file hole.
void write_sparse_safetensors(const std::string& path, const nlohmann::json& header, uint64_t data_bytes);

// Columns a line takes on a terminal: UTF-8 code points (every character nunchaku prints
// is one column wide), and the widest line of a text (the checkout's location in a path
// counted as "./": a path is printed whole, never cut, so widths checked do not depend on
// where the tree was cloned; checkout_as_dot does that replacement).
size_t columns(const std::string& line);
size_t widest(const std::string& text);
std::string checkout_as_dot(std::string text);

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs the built nunchaku binary with `args` (shell-quoted here), capturing stdout and stderr.
RunResult run_cli(const std::vector<std::string>& args, const std::string& stdin_text = "");

// The name of cuda:0 when it is the CPU emulator (cuda/emu/, nunchaku_cuda_emu_tests), else "":
// CUDA tests WARN with it, so an emulator pass is never mistaken for a GPU result.
std::string cuda_emulator_name();

// Reports the running test case as skipped (it cannot run on this host): a WARN naming why,
// and, under ctest (which sets NUNCHAKU_SKIP_EXIT for the cases it registers and runs each in
// its own process), the process ends with that code, which ctest's SKIP_RETURN_CODE reports
// as "Skipped" instead of "Passed". Run directly, the case returns after the WARN.
void skip_case(const std::string& why);

}  // namespace nunchaku::test

// Skip the current test case (with a message) when the shared test files are absent.
#define NUNCHAKU_REQUIRE_SHARED()                                                    \
  do {                                                                              \
    if (!nunchaku::test::have_shared_testfiles()) {                                 \
      WARN("skipped: ../shared/testfiles is absent");                               \
      return;                                                                       \
    }                                                                               \
  } while (0)
