#include "tests/helpers.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <random>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/device_info.hpp"

namespace fs = std::filesystem;

namespace nunchaku::test {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f.good()) throw std::runtime_error("cannot read " + path);
  return nlohmann::json::parse(f);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::pair<std::string, std::vector<int64_t>>> llama_tensors(const nlohmann::json& c) {
  const int64_t h = c["hidden_size"], layers = c["num_hidden_layers"], heads = c["num_attention_heads"];
  const int64_t kv = c.value("num_key_value_heads", heads), inter = c["intermediate_size"], vocab = c["vocab_size"];
  const int64_t kv_dim = h / heads * kv;
  std::vector<std::pair<std::string, std::vector<int64_t>>> ts = {{"model.embed_tokens.weight", {vocab, h}}};
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (auto [n, s] : std::vector<std::pair<const char*, std::vector<int64_t>>>{
             {"self_attn.q_proj.weight", {h, h}},      {"self_attn.k_proj.weight", {kv_dim, h}},
             {"self_attn.v_proj.weight", {kv_dim, h}}, {"self_attn.o_proj.weight", {h, h}},
             {"mlp.gate_proj.weight", {inter, h}},     {"mlp.up_proj.weight", {inter, h}},
             {"mlp.down_proj.weight", {h, inter}},     {"input_layernorm.weight", {h}},
             {"post_attention_layernorm.weight", {h}}})
      ts.push_back({p + n, s});
  }
  ts.push_back({"model.norm.weight", {h}});
  ts.push_back({"lm_head.weight", {vocab, h}});
  return ts;
}

void write_sparse_safetensors(const std::string& path, const nlohmann::json& header, uint64_t data_bytes) {
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  write_file(path, head + text);
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(8 + text.size() + data_bytes)) != 0) throw std::runtime_error("cannot extend " + path);
  ::close(fd);
}

void write_sparse_llama(const std::string& dir, const std::string& config) {
  const nlohmann::json c = read_json(config);
  write_file(dir + "/config.json", c.dump(2));
  nlohmann::json hdr = nlohmann::json::object();
  uint64_t off = 0;
  for (const auto& [name, shape] : llama_tensors(c)) {
    uint64_t n = 2;
    for (auto d : shape) n *= static_cast<uint64_t>(d);
    hdr[name] = {{"dtype", "F16"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  write_sparse_safetensors(dir + "/model.safetensors", hdr, off);
}

std::string testdata(const std::string& rel) { return std::string(NUNCHAKU_SOURCE_DIR) + "/testdata/" + rel; }

static fs::path shared_root() { return fs::path(NUNCHAKU_SOURCE_DIR).parent_path() / "shared" / "testfiles"; }

bool have_shared_testfiles() { return fs::is_directory(shared_root()); }

std::string shared_testfile(const std::string& rel) {
  if (!have_shared_testfiles()) return "";
  return (shared_root() / rel).string();
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  path = fs::temp_directory_path() /
         ("nunchaku-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(rd()));
  fs::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

void write_file(const std::string& p, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_file(const std::string& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

static std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

static std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

size_t columns(const std::string& line) {
  size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80;
  return n;
}

std::string checkout_as_dot(std::string text) {
  const std::string root = std::string(NUNCHAKU_SOURCE_DIR) + "/";
  for (size_t at; (at = text.find(root)) != std::string::npos;) text.replace(at, root.size(), "./");
  return text;
}

size_t widest(const std::string& text) {
  std::istringstream in(checkout_as_dot(text));
  size_t w = 0;
  for (std::string line; std::getline(in, line);) w = std::max(w, columns(line));
  return w;
}

RunResult run_cli(const std::vector<std::string>& args, const std::string& stdin_text) {
  TempDir tmp;
  std::string cmd = quote(NUNCHAKU_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  write_file(tmp.file("in"), stdin_text);
  cmd += " <" + quote(tmp.file("in")) + " >" + quote(tmp.file("out")) + " 2>" + quote(tmp.file("err"));
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(tmp.file("out"));
  r.err = slurp(tmp.file("err"));
  return r;
}

std::string cuda_emulator_name() {
  for (const auto& d : cuda::list_devices())
    if (d.index == 0 && d.name.find("emulator") != std::string::npos) return d.name;
  return "";
}

void skip_case(const std::string& why) {
  WARN("skipped: " << why);
  if (const char* code = std::getenv("NUNCHAKU_SKIP_EXIT"); code && *code) {
    std::fprintf(stderr, "skipped: %s\n", why.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(std::atoi(code));
  }
}

}  // namespace nunchaku::test
