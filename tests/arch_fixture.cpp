// Header-only checkpoints from testdata/arch/<case>/ (config.json + tensors.json).
#include "tests/arch_fixture.hpp"

#include <catch2/catch.hpp>
#include <unistd.h>

#include "tests/helpers.hpp"

namespace nunchaku::test {
namespace {

using nlohmann::json;

uint64_t dtype_size(const std::string& d) {
  if (d == "F32" || d == "I32") return 4;
  if (d == "F16" || d == "BF16") return 2;
  return 1;  // U8, F8_E4M3
}

}  // namespace

void write_arch_fixture(const std::filesystem::path& src, const std::string& dir) {
  const json cfg = read_json((src / "config.json").string());
  write_file(dir + "/config.json", cfg.dump(1));
  const json list = read_json((src / "tensors.json").string());
  const json& text = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  const int64_t experts = text.value("n_routed_experts", text.value("num_local_experts", text.value("num_experts", 0)));
  json hdr = json::object();
  uint64_t off = 0;
  auto add = [&](const std::string& name, const std::string& dtype, const json& shape) {
    uint64_t n = dtype_size(dtype);
    for (const auto& d : shape) n *= d.get<uint64_t>();
    hdr[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  };
  for (const auto& t : list) {
    const std::string name = t[0];
    if (auto h = name.find('#'); h != std::string::npos) {
      for (int64_t e = 0; e < experts; ++e) add(name.substr(0, h) + std::to_string(e) + name.substr(h + 1), t[1], t[2]);
    } else {
      add(name, t[1], t[2]);
    }
  }
  std::string body = hdr.dump();
  while (body.size() % 8) body += ' ';
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((body.size() >> (8 * i)) & 0xff);
  const std::string path = dir + "/model.safetensors";
  write_file(path, head + body);
  REQUIRE(truncate(path.c_str(), static_cast<off_t>(8 + body.size() + off)) == 0);
}


}  // namespace nunchaku::test
