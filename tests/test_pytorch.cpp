// PyTorch reader against torch.load: every real file in ../shared/testfiles/pytorch
// and the fixtures in testdata/pytorch/ are compared with what
// scripts/expect_shared_pytorch.py read back with torch 2.5 (names, dtype, shape,
// strides, storage offsets, which tensors share storage, and a hash of every
// tensor's elements gathered from the file at the reported offset and strides).
// Then one hand-built hostile archive or stream per validation rule.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "format/open.hpp"
#include "format/readers.hpp"
#include "format/verify.hpp"
#include "format/zip.hpp"
#include "core/file.hpp"
#include "core/source.hpp"
#include "tests/helpers.hpp"

using namespace nunchaku;
using nlohmann::json;

namespace {

template <size_t N>
std::string B(const char (&s)[N]) { return std::string(s, N - 1); }

std::string le(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>(v >> (8 * i));
  return s;
}

uint64_t fnv1a(const std::vector<uint8_t>& b) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t x : b) h = (h ^ x) * 0x100000001b3ull;
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The tensor's elements in row-major order, gathered from the file through its
// offset and strides (contiguous strides when none are reported).
std::vector<uint8_t> gather(const File& f, const TensorInfo& t) {
  const uint64_t es = dtype_info(t.dtype).block_bytes;
  std::vector<int64_t> st = t.strides;
  if (st.empty()) {
    st.assign(t.shape.size(), 1);
    for (size_t d = t.shape.size(); d-- > 1;) st[d - 1] = st[d] * t.shape[d];
  }
  std::vector<uint8_t> span(t.nbytes), out;
  if (t.nbytes) f.read_at(t.offset, span.data(), span.size());
  const uint64_t n = t.numel();
  std::vector<int64_t> idx(t.shape.size(), 0);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t e = 0;
    for (size_t d = 0; d < idx.size(); ++d) e += static_cast<uint64_t>(idx[d] * st[d]);
    if ((e + 1) * es > span.size()) {
      FAIL_CHECK("element " << i << " lies past nbytes");
      return {};
    }
    out.insert(out.end(), span.begin() + static_cast<std::ptrdiff_t>(e * es), span.begin() + static_cast<std::ptrdiff_t>((e + 1) * es));
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

const json& expectations() {
  static const json j = [] {
    std::ifstream f(test::testdata("expected/shared_pytorch.json"));
    return json::parse(f);
  }();
  return j;
}

void compare(const std::string& path, const json& want) {
  INFO(path);
  Checkpoint ck = read_pytorch(FileSource(path));
  File f = File::open_read_only(path);
  CHECK(ck.format == Format::PyTorch);
  REQUIRE(ck.files.size() == 1);
  CHECK(ck.files[0].bytes == f.size());
  const json& wt = want["tensors"];
  REQUIRE(ck.tensors.size() == wt.size());
  for (size_t i = 0; i < wt.size(); ++i) {
    const TensorInfo& t = ck.tensors[i];
    const json& w = wt[i];
    INFO(t.name);
    CHECK(t.name == w["name"].get<std::string>());
    CHECK(dtype_name(t.dtype) == w["dtype"].get<std::string>());
    CHECK(t.shape == w["shape"].get<std::vector<int64_t>>());
    if (w["contiguous"].get<bool>()) CHECK(t.strides.empty());
    else CHECK(t.strides == w["stride"].get<std::vector<int64_t>>());
    CHECK(t.storage_offset == w["storage_offset"].get<uint64_t>());
    CHECK(t.file == 0u);
    CHECK(t.offset + t.nbytes <= f.size());
    if (w["contiguous"].get<bool>()) {  // the raw range is exactly the tensor's bytes
      CHECK(t.nbytes == w["bytes"].get<uint64_t>());
      std::vector<uint8_t> raw(t.nbytes);
      if (t.nbytes) f.read_at(t.offset, raw.data(), raw.size());
      CHECK(hex64(fnv1a(raw)) == w["fnv1a"].get<std::string>());
    }
    CHECK(hex64(fnv1a(gather(f, t))) == w["fnv1a"].get<std::string>());
    // same torch storage <=> same storage key (empty tensors have no storage to compare)
    for (size_t j = 0; j < i; ++j) {
      int gi = w["storage_group"], gj = wt[j]["storage_group"];
      if (gi >= 0 && gj >= 0) CHECK((gi == gj) == (t.storage == ck.tensors[j].storage));
    }
  }
  CHECK(ck.metadata == want["metadata"]);
}

// ---- hand-built archives ----------------------------------------------------

struct ZipEntry {
  std::string name, data;
  uint16_t method = 0;
  int64_t claimed_size = -1;  // central directory size field override
  uint32_t crc = 0;           // CRC-32 recorded in the central directory
};

// A zip as torch writes it (stored entries), optionally with zip64 fields
// everywhere; `offsets` receives each entry's data offset.
std::string make_zip(const std::vector<ZipEntry>& entries, bool zip64 = false, std::vector<uint64_t>* offsets = nullptr) {
  std::string out, dir;
  for (const auto& e : entries) {
    const uint64_t lho = out.size();
    const uint64_t size = e.claimed_size >= 0 ? static_cast<uint64_t>(e.claimed_size) : e.data.size();
    out += "PK\x03\x04" + le(20, 2) + le(0, 2) + le(e.method, 2) + le(0, 4) + le(0, 4) + le(size, 4) + le(size, 4) +
           le(e.name.size(), 2) + le(0, 2) + e.name;
    if (offsets) offsets->push_back(out.size());
    out += e.data;
    std::string extra = zip64 ? le(1, 2) + le(24, 2) + le(size, 8) + le(size, 8) + le(lho, 8) : "";
    const uint64_t sat = zip64 ? 0xFFFFFFFFu : 0;
    dir += "PK\x01\x02" + le(20, 2) + le(45, 2) + le(0, 2) + le(e.method, 2) + le(0, 4) + le(e.crc, 4) +
           le(zip64 ? sat : size, 4) + le(zip64 ? sat : size, 4) + le(e.name.size(), 2) + le(extra.size(), 2) +
           le(0, 2) + le(0, 2) + le(0, 2) + le(0, 4) + le(zip64 ? sat : lho, 4) + e.name + extra;
  }
  const uint64_t dir_at = out.size();
  out += dir;
  if (zip64) {
    const uint64_t end64_at = out.size();
    out += "PK\x06\x06" + le(44, 8) + le(45, 2) + le(45, 2) + le(0, 4) + le(0, 4) + le(entries.size(), 8) +
           le(entries.size(), 8) + le(dir.size(), 8) + le(dir_at, 8);
    out += "PK\x06\x07" + le(0, 4) + le(end64_at, 8) + le(1, 4);
    out += "PK\x05\x06" + le(0, 4) + le(0xFFFF, 2) + le(0xFFFF, 2) + le(0xFFFFFFFF, 4) + le(0xFFFFFFFF, 4) + le(0, 2);
  } else {
    out += "PK\x05\x06" + le(0, 4) + le(entries.size(), 2) + le(entries.size(), 2) + le(dir.size(), 4) + le(dir_at, 4) +
           le(0, 2);
  }
  return out;
}

std::string u(const std::string& s) { return "X" + le(s.size(), 4) + s; }
std::string i32(int64_t v) { return "J" + le(static_cast<uint64_t>(v), 4); }
std::string ints(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (auto x : v) s += i32(x);
  return s + "t";
}

// {name: _rebuild_tensor_v2(('storage', FloatStorage, key, 'cpu', numel), so, size, stride, False, OrderedDict())}
std::string tensor_pickle(const std::string& name, const std::string& key, int64_t numel, int64_t so,
                          const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  return "\x80\x02}(" + u(name) + "ctorch._utils\n_rebuild_tensor_v2\n((" + u("storage") + "ctorch\nFloatStorage\n" +
         u(key) + u("cpu") + i32(numel) + "tQ" + i32(so) + ints(size) + ints(stride) +
         "\x89" "ccollections\nOrderedDict\n)RtRu.";
}

std::string floats4() { return le(0x3f800000, 4) + le(0x40000000, 4) + le(0x40400000, 4) + le(0x40800000, 4); }

Checkpoint read_bytes(const std::string& bytes) {
  MemorySource src(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "hostile.pt");
  return read_pytorch(src);
}

std::string code_of(const std::string& bytes) {
  try {
    read_bytes(bytes);
  } catch (const Error& e) {
    CHECK(e.exit_code() == 2);
    CHECK(e.context().file == "hostile.pt");
    return e.code();
  }
  return "no error";
}

std::string good_zip(const std::string& pkl, bool zip64 = false) {
  return make_zip({{"top/data.pkl", pkl}, {"top/byteorder", "little"}, {"top/data/0", floats4()}}, zip64);
}

}  // namespace

TEST_CASE("pytorch: every shared test file matches torch.load", "[pytorch]") {
  NUNCHAKU_REQUIRE_SHARED();
  const json& files = expectations()["files"];
  size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::shared_testfile("pytorch"))) {
    const std::string name = e.path().filename().string();
    INFO(name);
    REQUIRE(files.contains("shared/" + name));  // regenerate the expectations when files are added
    const json& want = files["shared/" + name];
    ++seen;
    if (!want["ok"].get<bool>()) {  // broken.pt: torch fails, so must we, cleanly
      try {
        read_pytorch(FileSource(e.path().string()));
        FAIL("no error");
      } catch (const Error& err) {
        CHECK(err.exit_code() == 2);
        CHECK(err.context().file == e.path().string());
      }
      continue;
    }
    compare(e.path().string(), want);
  }
  size_t expected = 0;
  for (const auto& [k, v] : files.items()) expected += k.starts_with("shared/");
  CHECK(seen == expected);
}

TEST_CASE("pytorch: fixtures (views, strides, tied weights, legacy storage views) match torch.load", "[pytorch]") {
  for (const char* name : {"zip_views.pt", "legacy_views.pt", "legacy_storage_views.pt", "cross.pt"})
    compare(test::testdata(std::string("pytorch/") + name), expectations()["files"][std::string("testdata/") + name]);

  Checkpoint z = read_pytorch(FileSource(test::testdata("pytorch/zip_views.pt")));
  // tied: the same Parameter pickled twice is one storage at one offset
  const TensorInfo* a = z.find("model.embed.weight");
  const TensorInfo* b = z.find("model.lm_head.weight");
  REQUIRE((a && b));
  CHECK(a->storage == b->storage);
  CHECK(a->offset == b->offset);
  // base[:, 2] of a 4x6 float tensor: 2 elements in, stride 6, spans 3*6+1 elements
  const TensorInfo* col = z.find("model.column");
  REQUIRE(col);
  CHECK(col->offset == z.find("model.base")->offset + 2 * 4);
  CHECK(col->nbytes == (3 * 6 + 1) * 4u);
  // expand(4, 3) of a (1, 3) fp16 tensor: stride 0, only 3 elements stored
  const TensorInfo* ex = z.find("model.expanded");
  REQUIRE(ex);
  CHECK(ex->strides == std::vector<int64_t>{0, 1});
  CHECK(ex->nbytes == 6u);
  CHECK(z.metadata["betas"] == json::array({0.9, 0.999}));
  CHECK(z.metadata["name"] == "fixture");
  CHECK(!z.metadata.contains("layers.1.w"));  // tensors are not metadata
}

// The same tensors written by torch.save and by safetensors' save_file: same
// names, shapes, dtypes and identical bytes at the offsets each reader reports.
void same_tensors(const std::string& pt_path, const std::string& st_path, bool same_bytes) {
  Checkpoint pt = read_pytorch(FileSource(pt_path));
  Checkpoint st = read_safetensors(FileSource(st_path));
  File pf = File::open_read_only(pt_path), sf = File::open_read_only(st_path);
  REQUIRE(!pt.tensors.empty());
  REQUIRE(st.tensors.size() == pt.tensors.size());
  for (const auto& t : pt.tensors) {
    INFO(t.name);
    const TensorInfo* s = st.find(t.name);
    REQUIRE(s);
    CHECK(s->shape == t.shape);
    CHECK(s->dtype == t.dtype);
    REQUIRE(s->nbytes == t.nbytes);
    if (!same_bytes) continue;
    std::vector<uint8_t> x(t.nbytes), y(s->nbytes);
    pf.read_at(t.offset, x.data(), x.size());
    sf.read_at(s->offset, y.data(), y.size());
    CHECK(hex64(fnv1a(x)) == hex64(fnv1a(y)));  // not x == y: Catch would print megabytes
  }
}

int64_t read_i64(const std::string& path, uint64_t offset) {
  int64_t v = 0;
  File::open_read_only(path).read_at(offset, &v, sizeof v);
  return v;
}

TEST_CASE("pytorch: torch.save and safetensors files of the same tensors agree", "[pytorch]") {
  same_tensors(test::testdata("pytorch/cross.pt"), test::testdata("pytorch/cross.safetensors"), true);
}

TEST_CASE("pytorch: mnist.pt and mnist.safetensors have the same names and shapes", "[pytorch]") {
  NUNCHAKU_REQUIRE_SHARED();
  const std::string pt_path = test::shared_testfile("pytorch/mnist.pt");
  const std::string st_path = test::shared_testfile("safetensors/mnist.safetensors");
  // The two files are different training runs (torch.equal is False for every
  // tensor), so values are not compared; the step counters pin both readers'
  // offsets to what torch.load and safetensors.load_file report: 3752 and 7504.
  same_tensors(pt_path, st_path, false);
  Checkpoint pt = read_pytorch(FileSource(pt_path));
  Checkpoint st = read_safetensors(FileSource(st_path));
  CHECK(pt.tensors.size() == 20);
  CHECK(read_i64(pt_path, pt.find("norm1.num_batches_tracked")->offset) == 3752);
  CHECK(read_i64(st_path, st.find("norm1.num_batches_tracked")->offset) == 7504);
}

TEST_CASE("pytorch: hand-built zip, zip64 and arbitrary top folder", "[pytorch]") {
  const std::string pkl = tensor_pickle("w", "0", 4, 1, {3}, {1});
  for (bool zip64 : {false, true}) {
    INFO("zip64 " << zip64);
    std::vector<uint64_t> offs;
    std::string z = make_zip({{"any name/data.pkl", pkl}, {"any name/data/0", floats4()}}, zip64, &offs);
    Checkpoint ck = read_bytes(z);
    REQUIRE(ck.tensors.size() == 1);
    CHECK(ck.tensors[0].name == "w");
    CHECK(ck.tensors[0].offset == offs[1] + 4);  // storage offset 1 float
    CHECK(ck.tensors[0].nbytes == 12u);
    CHECK(ck.tensors[0].storage == "0");
    CHECK(ck.tensors[0].storage_offset == 1u);
  }
}

TEST_CASE("pytorch: hostile zip archives", "[pytorch]") {
  const std::string pkl = tensor_pickle("w", "0", 4, 0, {4}, {1});
  REQUIRE(code_of(good_zip(pkl)) == "no error");
  const std::string z = good_zip(pkl);
  SECTION("truncated archive") { CHECK(code_of(z.substr(0, z.size() - 30)) == "pytorch.not_zip"); }
  SECTION("truncated in the directory") { CHECK(code_of(z.substr(0, 200)) == "pytorch.not_zip"); }
  SECTION("no data.pkl") { CHECK(code_of(make_zip({{"top/data/0", floats4()}})) == "pytorch.no_data_pkl"); }
  SECTION("compressed storage") {
    CHECK(code_of(make_zip({{"top/data.pkl", pkl}, {"top/data/0", floats4(), 8}})) == "pytorch.compressed_entry");
  }
  SECTION("storage entry larger than the file") {
    CHECK(code_of(make_zip({{"top/data.pkl", pkl}, {"top/data/0", floats4(), 0, 1 << 30}})) == "pytorch.entry_out_of_file");
  }
  SECTION("central directory past the end") {
    std::string bad = z;
    bad.replace(bad.size() - 6, 4, le(0x7FFFFFFF, 4));  // directory offset
    CHECK(code_of(bad) == "pytorch.entry_out_of_file");
  }
  SECTION("huge entry count") {
    std::string bad = z;
    bad.replace(bad.size() - 12, 2, le(0xFFFF, 2));
    CHECK(code_of(bad) == "pytorch.bad_zip");
  }
  SECTION("missing storage entry") {
    CHECK(code_of(good_zip(tensor_pickle("w", "7", 4, 0, {4}, {1}))) == "pytorch.missing_storage");
  }
  SECTION("storage entry shorter than declared") {
    CHECK(code_of(good_zip(tensor_pickle("w", "0", 5, 0, {5}, {1}))) == "pytorch.storage_truncated");
  }
  SECTION("view past the storage end") {
    CHECK(code_of(good_zip(tensor_pickle("w", "0", 4, 2, {3}, {1}))) == "pytorch.storage_too_small");
    CHECK(code_of(good_zip(tensor_pickle("w", "0", 4, 0, {2, 2}, {3, 1}))) == "pytorch.storage_too_small");
    CHECK(code_of(good_zip(tensor_pickle("w", "0", 4, 0, {3, 1 << 30}, {1 << 30, 1 << 30}))) == "pytorch.storage_too_small");
  }
  SECTION("storage declaring more than the file") {
    CHECK(code_of(good_zip(tensor_pickle("w", "0", 0x7FFFFFFF, 0, {4}, {1}))) == "pytorch.storage_out_of_file");
  }
  SECTION("big-endian byte order") {
    CHECK(code_of(make_zip({{"top/data.pkl", pkl}, {"top/byteorder", "big"}, {"top/data/0", floats4()}})) ==
          "pytorch.big_endian");
  }
  SECTION("pickle calling os.system") {
    std::string evil = "\x80\x02}(" + u("w") + "cos\nsystem\n" + u("touch /tmp/pwned") + "\x85Ru.";
    try {
      read_bytes(good_zip(evil));
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == "pytorch.forbidden_global");
      CHECK(std::string(e.what()).find("os.system") != std::string::npos);
    }
    CHECK(!std::filesystem::exists("/tmp/pwned"));
  }
  SECTION("deep nesting") {
    std::string deep = "\x80\x02" + std::string(5000, ']') + std::string(4999, 'a') + ".";
    CHECK(code_of(good_zip(deep)) == "pickle.too_deep");
  }
  SECTION("huge string length in data.pkl") {
    CHECK(code_of(good_zip("\x80\x02X" + le(0xFFFFFFFE, 4) + "w.")) == "pickle.truncated");
  }
  SECTION("shared references that expand exponentially") {
    // t0 = []; t(i+1) = (t(i), t(i)): 60 levels, 2^60 paths through 61 values
    std::string dag = B("\x80\x02}(") + u("x") + B("]q\x00");
    for (int i = 0; i < 60; ++i) dag += B("h\x00h\x00\x86q\x00");
    CHECK(code_of(good_zip(dag + "u.")) == "pytorch.too_many_values");
  }
  SECTION("two entries with one name (which would a reader take?)") {
    CHECK(code_of(make_zip({{"top/data.pkl", pkl}, {"top/data/0", floats4()}, {"top/data/0", std::string(16, 'x')}})) ==
          "pytorch.duplicate_entry");
  }
  SECTION("two names flatten to the same dotted name") {
    std::string dup = "\x80\x02}(" + u("a.b") + "K\x01" + u("a") + "}" + u("b") + "K\x02su.";
    CHECK(code_of(good_zip(dup)) == "pytorch.duplicate_name");
  }
}

TEST_CASE("pytorch: --verify checks every zip entry's CRC-32", "[pytorch]") {
  // 0xCBF43926 is CRC-32's published check value for "123456789".
  const std::string good = make_zip({{"a", "123456789", 0, -1, 0xCBF43926u}, {"b", "", 0, -1, 0}});
  MemorySource src(std::span(reinterpret_cast<const uint8_t*>(good.data()), good.size()), "crc.zip");
  CHECK(zip::Archive(src).verify_crc32() == 9u);
  const std::string bad = make_zip({{"a", "123456789", 0, -1, 0xCBF43927u}});
  MemorySource bsrc(std::span(reinterpret_cast<const uint8_t*>(bad.data()), bad.size()), "crc.zip");
  try {
    zip::Archive(bsrc).verify_crc32();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "pytorch.bad_crc");
    CHECK(e.exit_code() == 2);
    CHECK(e.context().offset == 30u + 1);  // after the 30-byte local header and the name "a"
  }
  // A file torch.save wrote verifies; the same file with one data byte changed does not.
  test::TempDir dir;
  const std::string pt = test::testdata("models/llama-pt/model_zip.pt");
  CHECK_NOTHROW(verify_checkpoint(open_checkpoint(pt)));
  std::string bytes = test::read_text(pt);
  const Checkpoint ck = open_checkpoint(pt);
  bytes[ck.tensors[0].offset] ^= 0x01;
  const std::string copy = dir.file("flipped.pt");
  test::write_file(copy, bytes);
  try {
    verify_checkpoint(open_checkpoint(copy));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == "pytorch.bad_crc");
    CHECK(e.context().file == copy);
  }
}

TEST_CASE("pytorch: hostile legacy streams", "[pytorch]") {
  const std::string head = B("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.") + "\x80\x02M\xe9\x03." +
                           "\x80\x02}.";
  auto legacy = [&](int64_t numel_in_file, const std::string& data) {
    return head + tensor_pickle("w", "k", 4, 0, {4}, {1}) + "\x80\x02]" + u("k") + "a." +
           le(static_cast<uint64_t>(numel_in_file), 8) + data;
  };
  Checkpoint ok = read_bytes(legacy(4, floats4()));
  REQUIRE(ok.tensors.size() == 1);
  CHECK(ok.tensors[0].offset == legacy(4, floats4()).size() - 16);
  CHECK(code_of(legacy(4, floats4().substr(0, 12))) == "pytorch.storage_out_of_file");
  CHECK(code_of(legacy(int64_t{1} << 62, floats4())) == "pytorch.storage_out_of_file");
  CHECK(code_of(legacy(3, floats4().substr(0, 12))) == "pytorch.storage_truncated");
  CHECK(code_of(B("\x80\x02K\x01.")) == "pytorch.bad_magic");
  // the key list names a storage no tensor uses: its element size is unknown
  CHECK(code_of(head + tensor_pickle("w", "k", 4, 0, {4}, {1}) + "\x80\x02]" + u("zz") + "a." + le(4, 8) + floats4()) ==
        "pytorch.bad_storage");
  // a tensor whose storage is not in the key list
  CHECK(code_of(head + tensor_pickle("w", "k", 4, 0, {4}, {1}) + "\x80\x02]." + le(4, 8) + floats4()) ==
        "pytorch.missing_storage");
  CHECK(code_of(head.substr(0, 20)) == "pickle.truncated");
}

// A ustar archive: 512-byte headers (name, octal size, type '0', magic), data padded to 512.
std::string make_tar(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  for (const auto& [name, data] : entries) {
    std::string h(512, '\0');
    h.replace(0, name.size(), name);
    char size[12];
    std::snprintf(size, sizeof size, "%011o", static_cast<unsigned>(data.size()));
    h.replace(124, 11, size);
    h[156] = '0';
    h.replace(257, 5, "ustar");
    out += h + data + std::string((512 - data.size() % 512) % 512, '\0');
  }
  return out + std::string(1024, '\0');
}

TEST_CASE("pytorch: old tar format", "[pytorch]") {
  // storages: count 1, ('k', 'cpu', FloatStorage), 4 elements
  const std::string storages = B("\x80\x02K\x01.") + "\x80\x02(" + u("k") + u("cpu") + "ctorch\nFloatStorage\nt." +
                               le(4, 8) + floats4();
  const std::string pkl = tensor_pickle("w", "k", 4, 1, {3}, {1});
  std::string tar = make_tar({{"sys_info", "\x80\x02}."}, {"pickle", pkl}, {"storages", storages}});
  Checkpoint ck = read_bytes(tar);
  REQUIRE(ck.tensors.size() == 1);
  // entries at 0, 1024, 2048 (each pickle < 512 bytes): storages data at 2560; the elements follow
  // the count pickle (5 bytes), the header pickle and the 8-byte element count
  const uint64_t data = 5 * 512 + 5 + (storages.size() - 5 - 8 - 16) + 8;
  CHECK(ck.tensors[0].offset == data + 4);
  CHECK(ck.tensors[0].nbytes == 12u);
  CHECK(code_of(make_tar({{"pickle", pkl}})) == "pytorch.bad_tar");
  CHECK(code_of(make_tar({{"pickle", pkl}, {"storages", storages}, {"tensors", ""}})) == "pytorch.unsupported");
  CHECK(code_of(make_tar({{"pickle", pkl}, {"storages", storages.substr(0, storages.size() - 4)}})) ==
        "pytorch.storage_out_of_file");
  std::string cut = tar.substr(0, 3 * 512 + 100);
  CHECK(code_of(cut) == "pytorch.entry_out_of_file");
}

TEST_CASE("pytorch: not a checkpoint", "[pytorch]") {
  CHECK(code_of("") == "pytorch.unknown_format");
  CHECK(code_of("hello world") == "pytorch.unknown_format");
}
