#include "tests/helpers.hpp"

#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <random>
#include <sys/wait.h>
#include <unistd.h>

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

}  // namespace nunchaku::test
