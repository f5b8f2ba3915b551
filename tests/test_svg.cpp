// Pictures (core/svg.hpp, core/bar_chart.hpp, memory/memory_pictures.hpp, estimate/plan --svg):
// every SVG parses as XML (tests/xml_check.hpp), carries every component name and byte
// figure it draws, and its bars' heights are in the ratio of the numbers that the same
// command prints as JSON (an independent reading of the same estimate or plan).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "core/bar_chart.hpp"
#include "core/svg.hpp"
#include "core/units.hpp"
#include "tests/arch_fixture.hpp"
#include "tests/helpers.hpp"
#include "tests/xml_check.hpp"

using namespace nunchaku;
using namespace nunchaku::test;
using nlohmann::json;

namespace {

struct Segment {
  std::string bar, name;
  uint64_t bytes = 0;
  double x = 0, y = 0, height = 0;
};

// The segments of a chart: each <rect data-bytes> with its tooltip "BAR: NAME: SIZE (N B)".
std::vector<Segment> segments(const XmlElement& svg) {
  std::vector<Segment> out;
  // The bar label has no ": "; a segment's name may ("weights: layers 0-7").
  static const std::regex tip(R"(^(.*?): (.*): (\S+ \S+) \((\d+) B\)$)");
  for (const XmlElement* r : svg.find_all("rect")) {
    auto it = r->attrs.find("data-bytes");
    if (it == r->attrs.end()) continue;
    const XmlElement* t = r->child("title");
    REQUIRE(t);
    std::smatch m;
    REQUIRE(std::regex_match(t->text, m, tip));
    Segment s{m[1], m[2], std::stoull(it->second), std::stod(r->attrs.at("x")), std::stod(r->attrs.at("y")),
              std::stod(r->attrs.at("height"))};
    CHECK(std::stoull(m[4].str()) == s.bytes);  // the tooltip's exact figure is the rect's
    CHECK(m[3].str() == format_bytes(s.bytes));
    out.push_back(s);
  }
  return out;
}

// Heights in the ratio of the bytes: one scale (user units per byte) for every segment of
// every bar, to the two decimals the writer keeps.
void heights_in_ratio(const std::vector<Segment>& segs) {
  REQUIRE(!segs.empty());
  const Segment* big = &segs[0];
  for (const auto& s : segs)
    if (s.bytes > big->bytes) big = &s;
  const double per_byte = big->height / double(big->bytes);
  for (const auto& s : segs) {
    INFO(s.bar << " " << s.name << " " << s.bytes << " B, height " << s.height);
    CHECK(std::abs(s.height - per_byte * double(s.bytes)) <= 0.011);
  }
}

// Every name and human-readable size the chart draws is in its text.
void labels_drawn(const XmlElement& svg, const std::vector<Segment>& segs) {
  const std::string text = svg.all_text();
  for (const auto& s : segs) {
    INFO(s.name);
    CHECK(text.find(s.name + " " + format_bytes(s.bytes)) != std::string::npos);
    CHECK(text.find(s.bar) != std::string::npos);
  }
}

std::unique_ptr<XmlElement> svg_file(const std::string& path) {
  const std::string doc = read_text(path);
  REQUIRE(!doc.empty());
  auto root = parse_xml(doc);
  REQUIRE(root->name == "svg");
  CHECK(root->attrs.at("xmlns") == "http://www.w3.org/2000/svg");
  CHECK(root->find_all("script").empty());  // self-contained, nothing runs
  CHECK(doc.find("href") == std::string::npos);
  return root;
}

json json_of(const std::vector<std::string>& args, int exit_code) {
  auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.exit_code == exit_code);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("xml checker: well-formed documents parse, broken ones are refused", "[svg]") {
  auto root = parse_xml("<?xml version=\"1.0\"?>\n<a x='1' y=\"&lt;&amp;&#x41;\"><!-- c --><b>t&gt;&#65;</b><c/></a>\n");
  CHECK(root->attrs.at("y") == "<&A");
  CHECK(root->child("b")->text == "t>A");
  for (const char* bad : {"<a>", "<a></b>", "<a x=1/>", "<a x='1' x='2'/>", "<a>&nope;</a>", "<a/><b/>", "<a>\x01</a>",
                          "<a x='<'/>", "<a><![CDATA[x]]></a>"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_xml(bad), std::runtime_error);
  }
}

TEST_CASE("svg: text is escaped once, through printable(), and reads back as written", "[svg]") {
  CHECK(Svg::escape("a<b & \"c\" 'd' >") == "a&lt;b &amp; &quot;c&quot; &apos;d&apos; &gt;");
  CHECK(Svg::escape(std::string("bell\x07") + "\xff") == "bell\\x07\xEF\xBF\xBD");  // control char and invalid UTF-8 made visible
  BarChart c;
  c.title = "<script>alert(1)</script> & co";
  c.groups.push_back({"run\"time", {Bar{"cuda:0 <x>", {{"weights: a&b", 300}, {"kv_cache", 100}}, 1000}}});
  auto root = parse_xml(bar_chart_svg(c));
  CHECK(root->find_all("script").empty());
  const std::string text = root->all_text();
  CHECK(text.find("<script>alert(1)</script> & co") != std::string::npos);
  CHECK(text.find("weights: a&b 300 B") != std::string::npos);
  CHECK(text.find("run\"time") != std::string::npos);
  CHECK(text.find("headroom 600 B") != std::string::npos);
  auto segs = segments(*root);
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].height == Approx(segs[1].height * 3).margin(0.011));
  // The budget line (dashed) at 1000 B on the bars' scale, above their 400 B.
  const double per_byte = segs[0].height / 300, bottom = segs[0].y + segs[0].height;
  int budget_lines = 0;
  for (const XmlElement* l : root->find_all("line"))
    if (l->attrs.count("stroke-dasharray")) {
      ++budget_lines;
      CHECK(std::stod(l->attrs.at("y1")) == Approx(bottom - 1000 * per_byte).margin(0.02));
    }
  CHECK(budget_lines == 1);
}

TEST_CASE("estimate --svg: one bar per GPU, the components of --json, heights in their ratio, the budget", "[svg]") {
  TempDir dir;
  const std::string svg = dir.file("estimate.svg");
  const std::vector<std::string> args = {"estimate", testdata("models/llama"), "--context", "256", "--batch", "4", "--vram", "1M"};
  auto with_svg = args;
  with_svg.insert(with_svg.end(), {"--svg", svg});
  auto json_args = args;
  json_args.push_back("--json");
  const json j = json_of(json_args, 3);  // 1 MiB is too little: the picture shows the shortfall
  auto r = run_cli(with_svg);
  REQUIRE(r.exit_code == 3);
  CHECK(r.err.find("wrote " + svg) != std::string::npos);
  auto root = svg_file(svg);
  const auto segs = segments(*root);
  heights_in_ratio(segs);
  labels_drawn(*root, segs);

  // The segments are the JSON's components (the GPU's, the weights split by module kind and
  // layer range; the host's in a bar of their own).
  std::map<std::string, uint64_t> drawn, drawn_host;
  for (const auto& s : segs) {
    if (s.bar == "host (CPU RAM)") {
      drawn_host[s.name] += s.bytes;
      continue;
    }
    CHECK(s.bar == "per GPU");
    drawn[s.name.rfind("weights", 0) == 0 ? "weights" : s.name] += s.bytes;
  }
  auto nonzero = [](const json& o) {
    std::map<std::string, uint64_t> m;
    for (const auto& [k, v] : o.items())
      if (v.get<uint64_t>() > 0) m[k] = v.get<uint64_t>();
    return m;
  };
  CHECK(drawn == nonzero(j["component_bytes"]));
  CHECK(drawn_host == nonzero(j["host_component_bytes"]));
  CHECK(std::count_if(segs.begin(), segs.end(), [](const Segment& s) { return s.name.rfind("weights: layer", 0) == 0; }) >= 2);
  const std::string text = root->all_text();
  const auto budget = j["verdict"]["budget_bytes"].get<uint64_t>();
  const auto headroom = j["verdict"]["headroom_bytes"].get<int64_t>();
  REQUIRE(headroom < 0);
  CHECK(text.find("budget " + format_bytes(budget)) != std::string::npos);
  CHECK(text.find("short by " + format_bytes(uint64_t(-headroom))) != std::string::npos);
  CHECK(text.find("total " + format_bytes(j["total_bytes"].get<uint64_t>())) != std::string::npos);
}

TEST_CASE("estimate --svg --runtime all: one bar group per runtime, side by side", "[svg]") {
  TempDir dir;
  const std::string svg = dir.file("all.svg");
  const json j = json_of({"estimate", testdata("models/llama"), "--runtime", "all", "--vram", "1G", "--json"}, 0);
  REQUIRE(run_cli({"estimate", testdata("models/llama"), "--runtime", "all", "--vram", "1G", "--svg", svg}).exit_code == 0);
  auto root = svg_file(svg);
  const auto segs = segments(*root);
  heights_in_ratio(segs);
  labels_drawn(*root, segs);
  const std::string text = root->all_text();
  size_t bars = 0;  // a GPU bar per runtime, and a host bar where it charges host memory
  for (const auto& [runtime, e] : j["runtimes"].items()) {
    INFO(runtime);
    CHECK(text.find(runtime) != std::string::npos);
    CHECK(text.find("total " + format_bytes(e["total_bytes"].get<uint64_t>())) != std::string::npos);
    bars += 1 + (e.value("host_total_bytes", uint64_t(0)) > 0);
  }
  std::set<double> xs;
  for (const auto& s : segs) xs.insert(s.x);
  CHECK(xs.size() == bars);  // each bar at its own x
}

TEST_CASE("plan --svg: a bar per device with the layers it holds, the charges of --json", "[svg]") {
  TempDir dir;
  const std::string svg = dir.file("plan.svg");
  // A budget one layer's weights short of everything on the GPU: the plan splits the layers.
  const std::vector<std::string> base = {"plan", testdata("models/llama"), "--cpu-ram", "1G", "--context", "64",
                                         "--overhead", "cuda_context=0", "--overhead", "cublas_workspace=0"};
  auto all_args = base;
  all_args.insert(all_args.end(), {"--vram", "1G", "--json"});
  const uint64_t all_on_gpu = json_of(all_args, 0)["devices"][0]["total_bytes"];
  auto args = base;
  uint64_t layer_bytes = 0;
  const json est = json_of({"estimate", testdata("models/llama"), "--json"}, 0);
  for (const auto& m : est["modules"])
    if (m["name"] == "model.layers.1") layer_bytes = m["weight_bytes"];
  REQUIRE(layer_bytes > 0);
  args.insert(args.end(), {"--vram", std::to_string(all_on_gpu - layer_bytes) + "B"});
  auto json_args = args;
  json_args.push_back("--json");
  const json j = json_of(json_args, 0);
  auto with_svg = args;
  with_svg.insert(with_svg.end(), {"--svg", svg});
  REQUIRE(run_cli(with_svg).exit_code == 0);
  auto root = svg_file(svg);
  const auto segs = segments(*root);
  heights_in_ratio(segs);
  labels_drawn(*root, segs);
  const std::map<std::string, std::string> field = {{"kv_cache", "kv_cache_bytes"},   {"activations", "activation_bytes"},
                                                    {"logits", "logits_bytes"},       {"train_states", "train_state_bytes"},
                                                    {"overheads", "overhead_bytes"},  {"staging", "staging_bytes"}};
  REQUIRE(j["devices"].size() >= 2);  // some layers on the GPU, the rest on the CPU
  CHECK(j["devices"][0]["num_layers"].get<int>() >= 1);
  CHECK(j["devices"][1]["num_layers"].get<int>() >= 1);
  const std::string text = root->all_text();
  for (const auto& d : j["devices"]) {
    const std::string dev = d["device"];
    INFO(dev);
    std::map<std::string, uint64_t> drawn;
    for (const auto& s : segs)
      if (s.bar == dev) drawn[s.name.rfind("weights", 0) == 0 ? "weight_bytes" : field.at(s.name)] += s.bytes;
    for (const auto& key : {"weight_bytes", "kv_cache_bytes", "activation_bytes", "logits_bytes", "train_state_bytes",
                            "overhead_bytes", "staging_bytes"})
      CHECK(drawn[key] == d[key].get<uint64_t>());
    if (d["num_layers"].get<int>() == 1) CHECK(text.find(fmt::format("weights: layer {} ", d["layer_range"][0].get<int>())) != std::string::npos);
    if (!d["layer_range"].is_null() && d["num_layers"].get<int>() > 1) {
      const int first = d["layer_range"][0], last = d["layer_range"][1];
      CHECK(text.find(fmt::format("weights: layers {}-", first)) != std::string::npos);
      CHECK(text.find(fmt::format("-{} ", last)) != std::string::npos);
    }
    if (!d["budget_bytes"].is_null()) CHECK(text.find("budget " + format_bytes(d["budget_bytes"].get<uint64_t>())) != std::string::npos);
  }
  CHECK(text.find(j["verdict"]["text"].get<std::string>()) != std::string::npos);
}

TEST_CASE("estimate and plan: --svg naming the checkpoint is refused before anything is written", "[svg]") {
  TempDir dir;
  std::filesystem::copy(testdata("models/llama"), dir.path / "m");
  const std::string weights = (dir.path / "m" / "model.safetensors").string();
  const std::string before = read_text(weights);
  auto r = run_cli({"estimate", (dir.path / "m").string(), "--svg", weights});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("model.safetensors") != std::string::npos);
  r = run_cli({"plan", (dir.path / "m").string(), "--vram", "1G", "--svg", weights});
  CHECK(r.exit_code == 2);
  CHECK(read_text(weights) == before);
}

TEST_CASE("README pictures: docs/pictures/ is what scripts/make_pictures.sh draws from the committed fixtures today", "[svg]") {
  // The same header-only Llama-3-8B the script writes (testdata/arch/llama3-8b), the same
  // commands: a picture that no longer matches the estimate or plan fails here.
  TempDir dir;
  test::write_arch_fixture(std::filesystem::path(testdata("arch")) / "llama3-8b", dir.path.string());
  const std::string model = dir.path.string();
  const std::string est = dir.file("estimate.svg"), plan = dir.file("plan.svg");
  // --threads 1: the CPU share of a run charges per-thread buffers and this binary's static
  // TLS per extra thread, so the pictures would otherwise depend on the host's cores and the build.
  REQUIRE(run_cli({"estimate", model, "--context", "8192", "--runtime", "all", "--vram", "24G", "--threads", "1", "--svg", est}).exit_code == 0);
  REQUIRE(run_cli({"plan", model, "--context", "8192", "--vram", "12G", "--cpu-ram", "16G", "--threads", "1", "--svg", plan}).exit_code == 0);
  const std::string docs = std::string(NUNCHAKU_SOURCE_DIR) + "/docs/pictures/";
  CHECK(read_text(est) == read_text(docs + "estimate-llama3-8b.svg"));
  CHECK(read_text(plan) == read_text(docs + "plan-llama3-8b.svg"));
  for (const char* f : {"estimate-llama3-8b.svg", "plan-llama3-8b.svg", "run-trace.svg"}) {
    INFO(f);
    auto root = svg_file(docs + f);
    if (std::string(f) != "run-trace.svg") {
      const auto segs = segments(*root);
      heights_in_ratio(segs);
      labels_drawn(*root, segs);
    }
  }
}
