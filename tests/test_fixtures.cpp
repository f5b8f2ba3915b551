// The committed fixtures under testdata/models were written by transformers,
// gguf-py and torch.save; testdata/expected/fixtures.json is what the
// reference libraries (safetensors header + safe_open, gguf.GGUFReader,
// torch.load + the zip directory) read back from them. Both come from
// scripts/make_testdata.py. Here nunchaku's index must agree with that file
// on every count, file size and tensor (dtype, shape, offset, nbytes, file).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "format/open.hpp"
#include "model/model.hpp"
#include "tests/helpers.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using nunchaku::test::testdata;

namespace {

const json& fixtures() {
  static const json doc = [] {
    std::ifstream f(testdata("expected/fixtures.json"));
    REQUIRE(f.good());
    return json::parse(f);
  }();
  return doc.at("fixtures");
}

std::string base(const std::string& p) { return fs::path(p).filename().string(); }

std::vector<int64_t> ints(const json& a) { return a.get<std::vector<int64_t>>(); }

void check_pytorch_storage(const nunchaku::Checkpoint& ck, const json& want) {
  // Storage keys are the writer's names; what must match is which tensors alias
  // one storage: equal (file, key) in the reference <=> equal (file, key) here.
  std::map<std::pair<std::string, std::string>, std::pair<uint32_t, std::string>> ref_to_ours;
  std::map<std::pair<uint32_t, std::string>, std::pair<std::string, std::string>> ours_to_ref;
  for (const auto& [name, t] : want.at("tensors").items()) {
    const auto* got = ck.find(name);
    if (!got) continue;  // reported by the main comparison
    INFO("tensor " << name);
    CHECK(got->storage_offset == t.at("storage_offset").get<uint64_t>());
    CHECK(got->strides == ints(t.at("strides")));
    const std::pair<std::string, std::string> ref{t.at("file"), t.at("storage")};
    const std::pair<uint32_t, std::string> ours{got->file, got->storage};
    auto [it, fresh] = ref_to_ours.emplace(ref, ours);
    CHECK(it->second == ours);
    auto [jt, fresh2] = ours_to_ref.emplace(ours, ref);
    CHECK(jt->second == ref);
  }
}

void check_fixture(const std::string& rel) {
  INFO("fixture testdata/" << rel);
  REQUIRE(fixtures().contains(rel));
  const json& want = fixtures().at(rel);
  const nunchaku::Checkpoint ck = nunchaku::open_checkpoint(testdata(rel));

  CHECK(std::string(nunchaku::format_name(ck.format)) == want.at("format").get<std::string>());

  // Weight files: same names and byte sizes (order-independent; the index is not a weight file).
  std::map<std::string, uint64_t> want_files, got_files;
  for (const auto& f : want.at("files")) want_files[f.at("name")] = f.at("bytes");
  for (const auto& f : ck.files) got_files[base(f.path)] = f.bytes;
  CHECK(got_files == want_files);

  CHECK(ck.tensors.size() == want.at("tensor_count").get<size_t>());
  CHECK(ck.total_parameters() == want.at("parameter_count").get<uint64_t>());
  CHECK(ck.total_bytes() == want.at("total_bytes").get<uint64_t>());

  // Every tensor, field by field; collect names to catch extras and duplicates.
  std::set<std::string> seen;
  for (const auto& t : ck.tensors) {
    INFO("tensor " << t.name);
    CHECK(seen.insert(t.name).second);
    CHECK(want.at("tensors").contains(t.name));
  }
  for (const auto& [name, t] : want.at("tensors").items()) {
    INFO("tensor " << name);
    const auto* got = ck.find(name);
    CHECK(got != nullptr);
    if (!got) continue;
    CHECK(std::string(nunchaku::dtype_name(got->dtype)) == t.at("dtype").get<std::string>());
    CHECK(got->shape == ints(t.at("shape")));
    CHECK(got->offset == t.at("offset").get<uint64_t>());
    CHECK(got->nbytes == t.at("nbytes").get<uint64_t>());
    REQUIRE(got->file < ck.files.size());
    CHECK(base(ck.files[got->file].path) == t.at("file").get<std::string>());
    // A tensor's bytes lie inside its file.
    CHECK(got->offset + got->nbytes <= ck.files[got->file].bytes);
  }

  if (want.at("format") == "pytorch") check_pytorch_storage(ck, want);

  // config.json beside the weights is found exactly when the script wrote one.
  const bool has_config = want.at("config").is_object() && want.at("format") != "gguf";
  CHECK(ck.config_path.empty() == !has_config);
}

// Hyper-parameters as transformers (or the GGUF metadata) reported them.
void check_spec(const std::string& rel) {
  INFO("fixture testdata/" << rel);
  const json& cfg = fixtures().at(rel).at("config");
  REQUIRE(cfg.is_object());
  const auto layout = nunchaku::describe_model(nunchaku::open_checkpoint(testdata(rel)));
  REQUIRE(layout.spec.has_value());
  const auto& s = *layout.spec;
  CHECK(s.hidden_size == cfg.at("hidden_size").get<int64_t>());
  CHECK(s.num_layers == cfg.at("num_hidden_layers").get<int64_t>());
  CHECK(s.num_heads == cfg.at("num_attention_heads").get<int64_t>());
  CHECK(s.num_kv_heads == cfg.at("num_key_value_heads").get<int64_t>());
  CHECK(s.head_dim == cfg.at("head_dim").get<int64_t>());
  CHECK(s.intermediate_size == cfg.at("intermediate_size").get<int64_t>());
  CHECK(s.vocab_size == cfg.at("vocab_size").get<int64_t>());
  CHECK(s.max_context == cfg.at("max_position_embeddings").get<int64_t>());
  CHECK(s.tie_word_embeddings == cfg.at("tie_word_embeddings").get<bool>());
  if (cfg.contains("num_local_experts") && cfg["num_local_experts"].is_number())
    CHECK(s.num_experts == cfg["num_local_experts"].get<int64_t>());
}

// One test case per fixture so ctest names the one that fails.
const std::vector<std::string> kFixtures = {
    "models/llama", "models/qwen2", "models/mixtral", "models/gpt2", "models/mistral",
    "models/qwen3", "models/gemma", "models/gemma2", "models/phi3",
    "models/llama-sharded", "models/llama-sharded/model.safetensors.index.json",
    "models/llama-bin", "models/llama-gguf/model.gguf",
    "models/llama-pt/model_zip.pt", "models/llama-pt/model_legacy.pt", "models/pt-nested/checkpoint.pt",
};

}  // namespace

TEST_CASE("fixtures.json lists exactly the fixtures tested here", "[fixtures]") {
  std::set<std::string> in_json;
  for (const auto& [k, v] : fixtures().items()) in_json.insert(k);
  CHECK(in_json == std::set<std::string>(kFixtures.begin(), kFixtures.end()));
}

TEST_CASE("fixture: transformers llama safetensors", "[fixtures]") { check_fixture("models/llama"); }
TEST_CASE("fixture: transformers qwen2 safetensors (tied, qkv bias)", "[fixtures]") { check_fixture("models/qwen2"); }
TEST_CASE("fixture: transformers mixtral safetensors (4 experts)", "[fixtures]") { check_fixture("models/mixtral"); }
TEST_CASE("fixture: transformers gpt2 safetensors", "[fixtures]") { check_fixture("models/gpt2"); }
TEST_CASE("fixture: transformers mistral safetensors", "[fixtures]") { check_fixture("models/mistral"); }
TEST_CASE("fixture: transformers qwen3 safetensors (BF16)", "[fixtures]") { check_fixture("models/qwen3"); }
TEST_CASE("fixture: transformers gemma safetensors (F16)", "[fixtures]") { check_fixture("models/gemma"); }
TEST_CASE("fixture: transformers gemma2 safetensors", "[fixtures]") { check_fixture("models/gemma2"); }
TEST_CASE("fixture: transformers phi3 safetensors", "[fixtures]") { check_fixture("models/phi3"); }
TEST_CASE("fixture: sharded safetensors directory", "[fixtures]") { check_fixture("models/llama-sharded"); }
TEST_CASE("fixture: sharded safetensors by explicit index path", "[fixtures]") {
  check_fixture("models/llama-sharded/model.safetensors.index.json");
}
TEST_CASE("fixture: sharded pytorch_model.bin directory", "[fixtures]") { check_fixture("models/llama-bin"); }
TEST_CASE("fixture: gguf-py llama with F32/F16/Q8_0", "[fixtures]") { check_fixture("models/llama-gguf/model.gguf"); }
TEST_CASE("fixture: torch.save zip state_dict with tied weights", "[fixtures]") {
  check_fixture("models/llama-pt/model_zip.pt");
}
TEST_CASE("fixture: torch.save legacy state_dict with tied weights", "[fixtures]") {
  check_fixture("models/llama-pt/model_legacy.pt");
}
TEST_CASE("fixture: torch.save nested checkpoint with views", "[fixtures]") {
  check_fixture("models/pt-nested/checkpoint.pt");
  // Non-tensor leaves are kept as metadata, under their dotted names.
  const auto ck = nunchaku::open_checkpoint(testdata("models/pt-nested/checkpoint.pt"));
  const std::string meta = ck.metadata.dump();
  for (const auto& [k, v] : fixtures().at("models/pt-nested/checkpoint.pt").at("metadata").items()) {
    INFO("metadata leaf " << k << " in " << meta);
    CHECK(meta.find(k) != std::string::npos);
  }
}

TEST_CASE("fixtures: tensors are listed in file order, then offset order", "[fixtures]") {
  // The contract of Checkpoint::tensors (src/format/checkpoint.hpp). Tied weights and
  // views that point back at an earlier storage are where a reader that keeps
  // pickle order breaks it.
  for (const auto& rel : kFixtures) {
    const auto ck = nunchaku::open_checkpoint(testdata(rel));
    for (size_t i = 1; i < ck.tensors.size(); ++i) {
      const auto& a = ck.tensors[i - 1];
      const auto& b = ck.tensors[i];
      INFO("fixture testdata/" << rel << ": '" << a.name << "' (file " << a.file << ", offset " << a.offset
                               << ") before '" << b.name << "' (file " << b.file << ", offset " << b.offset << ")");
      CHECK((a.file < b.file || (a.file == b.file && a.offset <= b.offset)));
    }
  }
}

TEST_CASE("fixtures: same weights give the same index in every container", "[fixtures]") {
  // llama, llama-sharded and llama-bin hold identical tensors: names, dtypes and shapes agree.
  const auto a = nunchaku::open_checkpoint(testdata("models/llama"));
  for (const char* other : {"models/llama-sharded", "models/llama-bin"}) {
    INFO(other);
    const auto b = nunchaku::open_checkpoint(testdata(other));
    REQUIRE(a.tensors.size() == b.tensors.size());
    for (const auto& t : a.tensors) {
      INFO(t.name);
      const auto* u = b.find(t.name);
      REQUIRE(u != nullptr);
      CHECK(u->dtype == t.dtype);
      CHECK(u->shape == t.shape);
      CHECK(u->nbytes == t.nbytes);
    }
  }
}

TEST_CASE("fixtures: model hyper-parameters match what transformers / gguf reported", "[fixtures][model]") {
  for (const auto& rel : kFixtures) {
    if (fixtures().at(rel).at("config").is_null()) continue;
    check_spec(rel);
  }
}

TEST_CASE("cli: inspect on a missing path exits 2 and names the path", "[fixtures][cli]") {
  nunchaku::test::TempDir tmp;
  const std::string missing = tmp.file("no-such-model.safetensors");
  const auto r = nunchaku::test::run_cli({"inspect", missing});
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(missing) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
}
