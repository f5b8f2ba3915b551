// Traces (core/trace.hpp, io/memory_sampler.hpp, load/run --trace, nunchaku trace --svg):
// the files validate against docs/schema/trace.json (the Trace Event subset Perfetto's JSON
// importer reads), carry the phases that ran and the counters with their predictions, and the
// sampled RSS peak is within 5 % of getrusage's max RSS; the timeline SVG parses as XML and
// marks every counter's peak and predicted peak.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/timeline_picture.hpp"
#include "core/trace.hpp"
#include "core/units.hpp"
#include "io/memory_sampler.hpp"
#include "tests/helpers.hpp"
#include "tests/json_schema_check.hpp"
#include "tests/xml_check.hpp"

using namespace nunchaku;
using namespace nunchaku::test;
using nlohmann::json;

namespace {

void valid_trace(const json& doc) {
  static const json schema = read_json(std::string(NUNCHAKU_SOURCE_DIR) + "/docs/schema/trace.json");
  const auto errs = schema_errors(schema, doc);
  INFO(fmt::format("{}", fmt::join(errs, "\n  ")));
  CHECK(errs.empty());
}

std::multiset<std::string> phase_names(const json& doc) {
  std::multiset<std::string> out;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") out.insert(e["name"].get<std::string>());
  return out;
}

// Each counter's samples in file order.
std::map<std::string, std::vector<std::pair<double, uint64_t>>> counters(const json& doc) {
  std::map<std::string, std::vector<std::pair<double, uint64_t>>> out;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "C") out[e["name"]].push_back({e["ts"].get<double>(), e["args"]["bytes"].get<uint64_t>()});
  return out;
}

uint64_t peak(const std::vector<std::pair<double, uint64_t>>& s) {
  uint64_t p = 0;
  for (const auto& [_, v] : s) p = std::max(p, v);
  return p;
}

// Events in time order: Perfetto sorts them anyway, but the counters' step lines read in order.
void in_time_order(const json& doc) {
  double last = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    CHECK(e["ts"].get<double>() >= last);
    last = e["ts"].get<double>();
  }
}

// The timeline SVG of `trace_file`: parses, every measured counter's peak and its predicted
// peak labelled with the figures the events hold.
void timeline_marks_peaks(const std::string& trace_file, const TempDir& dir) {
  const std::string out = dir.file("timeline.svg");
  auto r = run_cli({"trace", trace_file, "--svg", out});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto root = parse_xml(read_text(out));
  REQUIRE(root->name == "svg");
  const std::string text = root->all_text();
  const auto cs = counters(read_json(trace_file));
  for (const auto& [name, s] : cs) {
    INFO(name);
    const std::string base = name.substr(0, name.find(" (predicted)"));
    auto peak_of = [&](const std::string& n) { return cs.count(n) ? peak(cs.at(n)) : 0; };
    if (peak_of(base) == 0 && peak_of(predicted_counter(base)) == 0) {
      CHECK(text.find("0 B throughout") != std::string::npos);  // one line, no panel
      CHECK(text.find(base) != std::string::npos);
      continue;
    }
    // A prediction is drawn in its counter's panel, labelled "predicted peak".
    CHECK(text.find(name.substr(0, name.find(" (predicted)"))) != std::string::npos);
    if (name.ends_with(" (predicted)")) {
      CHECK(text.find("predicted peak " + format_bytes(peak(s))) != std::string::npos);
    } else {
      CHECK(text.find("peak " + format_bytes(peak(s)) + " at ") != std::string::npos);
    }
  }
  for (const auto& n : phase_names(read_json(trace_file))) CHECK(text.find(n + " x") != std::string::npos);
}

}  // namespace

TEST_CASE("trace: spans from several threads and counters become Chrome trace events", "[trace]") {
  json doc;
  {
    trace::Recorder rec("nunchaku test");
    CHECK(trace::active() == &rec);
    CHECK_THROWS_AS(trace::Recorder("second"), std::logic_error);
    { trace::Span s("open", "load"); }
    std::thread t([] {
      trace::name_thread("reader");
      trace::Span s("read", "io");
    });
    t.join();
    rec.counter(kHostRssCounter, trace::Clock::now(), 1234);
    rec.counter(kHostRssCounter, rec.start() - std::chrono::seconds(1), 7);  // before the start: time 0
    doc = rec.to_json({{"command", "load"}});
  }
  CHECK(trace::active() == nullptr);
  { trace::Span off("read", "io"); }  // no recorder: nothing happens
  const auto& ev = doc["traceEvents"];
  std::map<std::string, int64_t> tid_of;
  std::map<int64_t, std::string> thread_names;
  for (const auto& e : ev) {
    if (e["ph"] == "X") tid_of[e["name"]] = e["tid"];
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
  }
  REQUIRE(tid_of.size() == 2);
  CHECK(tid_of["open"] != tid_of["read"]);
  CHECK(thread_names[tid_of["read"]] == "reader");
  const auto cs = counters(doc);
  REQUIRE(cs.at(kHostRssCounter).size() == 2);
  CHECK(cs.at(kHostRssCounter)[0] == std::pair<double, uint64_t>(0, 7));  // sorted by time
  CHECK(cs.at(kHostRssCounter)[1].second == 1234);
  CHECK(doc["displayTimeUnit"] == "ms");
  in_time_order(doc);
}

TEST_CASE("memory sampler: RSS follows an allocation, writes only changes, keeps the peak", "[trace]") {
  trace::Recorder rec("nunchaku test");
  MemorySampler s(rec, std::chrono::microseconds(1000));
  const uint64_t before = current_rss_bytes();
  {
    std::vector<char> big(64 << 20);
    for (size_t i = 0; i < big.size(); i += 4096) big[i] = 1;  // resident
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.stop();
  CHECK(s.samples() >= 10);
  CHECK(s.peak(kHostRssCounter) >= before + (60u << 20));
  const auto cs = counters(rec.to_json(json::object()));
  CHECK(peak(cs.at(kHostRssCounter)) == s.peak(kHostRssCounter));
  // The pinned counter never changed: its first and last sample only.
  CHECK(cs.at(kPinnedCounter).size() == 2);
  // /proc's RSS and getrusage's high-water mark count the same pages, each a little late.
  CHECK(double(s.peak(kHostRssCounter)) <= 1.05 * double(max_rss_bytes()));
}

TEST_CASE("load --trace: phases, counters and predictions, valid Trace Event JSON", "[trace]") {
  TempDir dir;
  const std::string file = dir.file("load.json");
  auto r = run_cli({"load", testdata("models/llama"), "--device", "cpu", "--copy", "--json", "--trace", file});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json report = json::parse(r.out);
  const json doc = read_json(file);
  valid_trace(doc);
  in_time_order(doc);
  const auto names = phase_names(doc);
  for (const char* n : {"open", "load", "alloc", "read"}) CHECK(names.count(n) >= 1);
  const auto cs = counters(doc);
  // With --copy every byte is read through read_range: the counter ends at the report's read_bytes,
  // and the prediction is what the load had to read.
  CHECK(cs.at(kFileReadCounter).back().second == report["read_bytes"].get<uint64_t>());
  CHECK(peak(cs.at(predicted_counter(kFileReadCounter))) == report["loaded_bytes"].get<uint64_t>());
  // The host prediction: RSS at the start plus the load's predicted host peak.
  const uint64_t start = doc["otherData"]["start_rss_bytes"];
  CHECK(start > 0);
  CHECK(peak(cs.at(predicted_counter(kHostRssCounter))) == start + report["host_peak_bytes"].get<uint64_t>());
  CHECK(doc["otherData"]["predicted_bytes"][kHostRssCounter] == start + report["host_peak_bytes"].get<uint64_t>());
  CHECK(doc["otherData"]["peak_bytes"][kHostRssCounter].get<uint64_t>() == peak(cs.at(kHostRssCounter)));
  timeline_marks_peaks(file, dir);
}

TEST_CASE("run --trace: prefill and decode steps, RSS peak within 5% of getrusage, --stats beside it", "[trace]") {
  TempDir dir;
  const std::string file = dir.file("run.json"), stats = dir.file("stats.json");
  auto r = run_cli({"run", testdata("run/llama-spm"), "--max-tokens", "8", "-q", "--trace", file, "--stats", stats},
                   "Once upon a time\nThe cat\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = read_json(file);
  valid_trace(doc);
  in_time_order(doc);
  const auto names = phase_names(doc);
  CHECK(names.count("open") == 1);
  CHECK(names.count("prefill") >= 1);
  CHECK(names.count("decode step") >= 1);
  const json st = read_json(stats);
  CHECK(names.count("prefill") + names.count("decode step") == st["num_forward_calls"].get<size_t>());
  const auto cs = counters(doc);
  const uint64_t sampled = peak(cs.at(kHostRssCounter));
  const uint64_t max_rss = doc["otherData"]["max_rss_bytes"];
  INFO("sampled RSS peak " << sampled << " B, getrusage max RSS " << max_rss << " B, --stats " << st["max_rss_bytes"]);
  CHECK(double(sampled) >= 0.95 * double(max_rss));
  CHECK(double(sampled) <= 1.05 * double(max_rss));
  CHECK(st["max_rss_bytes"].get<uint64_t>() >= max_rss);  // the stats are written after the trace
  CHECK(double(st["max_rss_bytes"].get<uint64_t>()) <= 1.05 * double(max_rss));
  CHECK(peak(cs.at(predicted_counter(kHostRssCounter))) ==
        doc["otherData"]["start_rss_bytes"].get<uint64_t>() + st["host_predicted_bytes"].get<uint64_t>());
  timeline_marks_peaks(file, dir);
}

TEST_CASE("run --trace on stories260K.gguf: a real GGUF's trace validates, RSS peak within 5%", "[trace]") {
  NUNCHAKU_REQUIRE_SHARED();
  TempDir dir;
  const std::string file = dir.file("run.json");
  auto r = run_cli({"run", shared_testfile("gguf/stories260K.gguf"), "--raw", "--max-tokens", "32", "-q", "--trace", file},
                   "{\"prompt\": \"\"}\n{\"prompt\": \"Once\"}\n");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json doc = read_json(file);
  valid_trace(doc);
  const uint64_t sampled = peak(counters(doc).at(kHostRssCounter)), max_rss = doc["otherData"]["max_rss_bytes"];
  INFO("sampled " << sampled << " B, getrusage " << max_rss << " B");
  CHECK(double(sampled) >= 0.95 * double(max_rss));
  CHECK(double(sampled) <= 1.05 * double(max_rss));
  CHECK(phase_names(doc).count("decode step") >= 30);
}

TEST_CASE("trace --svg: a file that is not a trace is refused with exit 2, nothing written", "[trace]") {
  TempDir dir;
  const std::string out = dir.file("t.svg");
  write_file(dir.file("bad.json"), std::string("{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"read\"}]}"));
  auto r = run_cli({"trace", dir.file("bad.json"), "--svg", out});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("bad.json") && Catch::Contains("event 0"));
  write_file(dir.file("broken.json"), std::string("{\"traceEvents\": ["));
  r = run_cli({"trace", dir.file("broken.json"), "--svg", out});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("broken.json"));
  // A number beyond double range (nlohmann's out_of_range, not a parse_error; fuzz_config found it in config.json).
  write_file(dir.file("huge.json"), std::string("{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1E400}]}"));
  r = run_cli({"trace", dir.file("huge.json"), "--svg", out});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("huge.json") && Catch::Contains("beyond the range"));
  r = run_cli({"trace", dir.file("missing.json"), "--svg", out});
  CHECK(r.exit_code == 2);
  CHECK(!std::filesystem::exists(out));
  r = run_cli({"trace", dir.file("bad.json"), "--svg", dir.file("bad.json")});  // the output would replace the input
  CHECK(r.exit_code == 2);
}

TEST_CASE("trace --svg: a tid that is not an integer, or a phase ending beyond double range, is exit 2 naming the file", "[trace]") {
  // Each was nlohmann's type_error as exit 1 "internal error" (a string or null tid), or an
  // undefined float-to-integer conversion (tid 1e300: "thread -9223372036854775808"), or a
  // timeline whose end is infinite (every coordinate "nan").
  TempDir dir;
  const std::string out = dir.file("t.svg");
  const std::pair<const char*, const char*> cases[] = {
      {"tid-string.json", R"({"traceEvents": [{"ph": "X", "name": "read", "ts": 0, "dur": 1, "tid": "main"}]})"},
      {"tid-null.json", R"({"traceEvents": [{"ph": "M", "name": "thread_name", "tid": null, "args": {"name": "x"}}]})"},
      {"tid-float.json", R"({"traceEvents": [{"ph": "X", "name": "read", "ts": 0, "dur": 1, "tid": 1e300}]})"},
      {"tid-unsigned.json", R"({"traceEvents": [{"ph": "X", "name": "read", "ts": 0, "dur": 1, "tid": 9223372036854775808}]})"},
      {"end-inf.json", R"({"traceEvents": [{"ph": "X", "name": "read", "ts": 1e308, "dur": 1e308, "tid": 1}]})"},
  };
  for (const auto& [name, text] : cases) {
    INFO(name);
    write_file(dir.file(name), std::string(text));
    auto r = run_cli({"trace", dir.file(name), "--svg", out});
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains(name) && Catch::Contains("event 0"));
    CHECK(r.err.find("internal error") == std::string::npos);
    CHECK(!std::filesystem::exists(out));
  }
}

TEST_CASE("trace --svg: a counter at 2^64 - 1 bytes labels its panel's scale 16384.00 PiB", "[trace]") {
  // The scale label went through a double (2^64 after rounding) back to uint64_t, undefined
  // and "0 B" on x86-64. 2^64 B = 2^14 PiB = 16384.00 PiB (format_bytes' largest unit).
  TempDir dir;
  write_file(dir.file("big.json"), std::string(R"({"traceEvents": [{"ph": "X", "name": "read", "ts": 0, "dur": 10, "tid": 1},)"
                                               R"( {"ph": "C", "name": "host RSS", "ts": 5, "args": {"bytes": 18446744073709551615}}]})"));
  auto r = run_cli({"trace", dir.file("big.json"), "--svg", dir.file("big.svg")});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto root = parse_xml(read_text(dir.file("big.svg")));
  std::vector<std::string> texts;
  for (const auto* t : root->find_all("text")) texts.push_back(t->text);
  CHECK(std::count(texts.begin(), texts.end(), "16384.00 PiB") == 1);  // the scale
  CHECK(std::count(texts.begin(), texts.end(), "peak 16384.00 PiB at 5 us") == 1);
  CHECK(std::count(texts.begin(), texts.end(), "0 B") == 0);
}
