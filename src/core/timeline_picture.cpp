#include "core/timeline_picture.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/svg.hpp"
#include "core/units.hpp"

namespace nunchaku {
namespace {

using nlohmann::json;

constexpr double kWidth = 960, kLeft = 180, kRight = 30, kPlotW = kWidth - kLeft - kRight;
constexpr double kRow = 16, kPanel = 110, kLine = 14;
constexpr const char* kPredicted = " (predicted)";

struct Phase {
  std::string name;
  int64_t tid = 0;
  double ts = 0, dur = 0;
};

struct Timeline {
  std::string process = "nunchaku", command, path;
  std::map<int64_t, std::string> threads;
  std::vector<Phase> phases;
  std::map<std::string, std::vector<std::pair<double, uint64_t>>> counters;  // name -> (ts, bytes), in time order
  double end = 1;                                                             // microseconds
};

Timeline read_timeline(const json& t, const std::string& file) {
  auto bad = [&](const std::string& what) {
    return Error("trace.format", fmt::format("not a nunchaku trace: {}", what), {.file = file, .hint = "write one with load --trace or run --trace"});
  };
  if (!t.is_object() || !t.contains("traceEvents") || !t["traceEvents"].is_array()) throw bad("no \"traceEvents\" array");
  Timeline tl;
  if (t.contains("otherData") && t["otherData"].is_object()) {
    const json& o = t["otherData"];
    if (o.contains("command") && o["command"].is_string()) tl.command = o["command"];
    if (o.contains("path") && o["path"].is_string()) tl.path = o["path"];
  }
  const json& ev = t["traceEvents"];
  for (size_t i = 0; i < ev.size(); ++i) {
    const json& e = ev[i];
    auto field = [&](const char* k) -> const json& {
      if (!e.is_object() || !e.contains(k)) throw bad(fmt::format("event {} has no \"{}\"", i, k));
      return e[k];
    };
    auto number = [&](const char* k) {
      const json& v = field(k);
      if (!v.is_number() || v.get<double>() < 0) throw bad(fmt::format("event {}: \"{}\" is not a number >= 0", i, k));
      return v.get<double>();
    };
    auto string = [&](const char* k) {
      const json& v = field(k);
      if (!v.is_string()) throw bad(fmt::format("event {}: \"{}\" is not a string", i, k));
      return v.get<std::string>();
    };
    auto tid = [&] {  // absent: 0; otherwise an integer that fits int64 (a float would convert undefined)
      if (!e.contains("tid")) return int64_t(0);
      const json& v = e["tid"];
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
        throw bad(fmt::format("event {}: \"tid\" is not an integer", i));
      return v.get<int64_t>();
    };
    const std::string ph = string("ph");
    if (ph == "M") {
      const json& a = field("args");
      if (!a.is_object() || !a.contains("name") || !a["name"].is_string()) continue;
      if (string("name") == "thread_name") tl.threads[tid()] = a["name"];
      else if (string("name") == "process_name") tl.process = a["name"];
    } else if (ph == "X") {
      Phase p{string("name"), tid(), number("ts"), number("dur")};
      if (!std::isfinite(p.ts + p.dur)) throw bad(fmt::format("event {}: \"ts\" + \"dur\" is beyond the range of a double", i));
      tl.end = std::max(tl.end, p.ts + p.dur);
      tl.phases.push_back(std::move(p));
    } else if (ph == "C") {
      const json& a = field("args");
      if (!a.is_object() || !a.contains("bytes") || !a["bytes"].is_number_unsigned())
        throw bad(fmt::format("event {}: a counter without an integer \"args\": {{\"bytes\"}}", i));
      const double ts = number("ts");
      tl.counters[string("name")].push_back({ts, a["bytes"].get<uint64_t>()});
      tl.end = std::max(tl.end, ts);
    }
  }
  for (auto& [_, v] : tl.counters)
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return tl;
}

std::string seconds_text(double us) {
  if (us >= 1e6) return fmt::format("{:.2f} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.1f} ms", us / 1e3);
  return fmt::format("{:.0f} us", us);
}

const char* phase_colour(const std::string& name) {
  static const std::map<std::string, const char*> c = {
      {"open", "#8c8c8c"},   {"load", "#4e79a7"},    {"alloc", "#76b7b2"},      {"read", "#59a14f"},
      {"convert", "#edc948"}, {"copy", "#f28e2b"},    {"copy wait", "#ff9da7"},  {"verify", "#b07aa1"},
      {"prefill", "#e15759"}, {"decode step", "#2e75b6"}, {"stream wait", "#9c755f"}};
  auto it = c.find(name);
  return it == c.end() ? "#bab0ac" : it->second;
}

// The lanes (one per thread, nested phases one row deeper); returns the y under them.
double draw_lanes(Svg& svg, const Timeline& tl, double y) {
  auto x = [&](double us) { return kLeft + us / tl.end * kPlotW; };
  std::map<int64_t, std::vector<const Phase*>> by_tid;
  for (const auto& p : tl.phases) by_tid[p.tid].push_back(&p);
  for (auto& [tid, ps] : by_tid) {
    std::stable_sort(ps.begin(), ps.end(), [](const Phase* a, const Phase* b) { return a->ts < b->ts; });
    std::vector<double> open_ends;  // ends of the enclosing phases
    struct Block { std::string name; size_t depth; double x0, x1; };
    std::vector<Block> blocks;
    size_t max_depth = 0;
    for (const Phase* p : ps) {
      while (!open_ends.empty() && open_ends.back() <= p->ts) open_ends.pop_back();
      const size_t depth = open_ends.size();
      open_ends.push_back(p->ts + p->dur);
      max_depth = std::max(max_depth, depth);
      const double x0 = x(p->ts), x1 = std::max(x(p->ts + p->dur), x0 + 0.5);
      auto same = std::find_if(blocks.rbegin(), blocks.rend(), [&](const Block& b) { return b.depth == depth; });
      if (same != blocks.rend() && same->name == p->name && x0 <= same->x1 + 0.5) same->x1 = std::max(same->x1, x1);
      else blocks.push_back({p->name, depth, x0, x1});
    }
    auto tn = tl.threads.find(tid);
    svg.text(kLeft - 8, y + 12, tn != tl.threads.end() ? tn->second : fmt::format("thread {}", tid), 11, "end");
    for (const auto& b : blocks)
      svg.rect(b.x0, y + double(b.depth) * kRow, b.x1 - b.x0, kRow - 2, fmt::format("fill=\"{}\"", phase_colour(b.name)), b.name);
    y += double(max_depth + 1) * kRow + 6;
  }
  // The time axis.
  svg.line(kLeft, y, kLeft + kPlotW, y, "stroke=\"#555\"");
  for (int i = 0; i <= 5; ++i) {
    const double t = tl.end * i / 5;
    svg.line(x(t), y, x(t), y + 4, "stroke=\"#555\"");
    svg.text(x(t), y + 16, seconds_text(t), 10, i == 0 ? "start" : i == 5 ? "end" : "middle", "fill=\"#555\"");
  }
  return y + 24;
}

// Each phase name's count and total time, in order of first appearance.
double draw_legend(Svg& svg, const Timeline& tl, double y) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<size_t, double>> sum;
  for (const auto& p : tl.phases) {
    if (!sum.count(p.name)) order.push_back(p.name);
    auto& s = sum[p.name];
    ++s.first, s.second += p.dur;
  }
  double x = 20;
  for (const auto& n : order) {
    const std::string label = fmt::format("{} x{}, {} total", n, sum[n].first, seconds_text(sum[n].second));
    const double w = 22 + 6.2 * double(label.size());
    if (x + w > kWidth - 10) x = 20, y += kLine + 2;
    svg.rect(x, y - 9, 10, 10, fmt::format("fill=\"{}\"", phase_colour(n)));
    svg.text(x + 14, y, label, 11);
    x += w;
  }
  return y + kLine + 10;
}

// One counter's panel: step line, prediction, peaks. Returns the y under it.
double draw_counter(Svg& svg, const Timeline& tl, const std::string& name, const std::vector<std::pair<double, uint64_t>>& s, double y) {
  const auto pred = tl.counters.find(name + kPredicted);
  uint64_t peak = 0, predicted = 0;
  double peak_at = 0;
  for (const auto& [ts, v] : s)
    if (v > peak) peak = v, peak_at = ts;
  if (pred != tl.counters.end())
    for (const auto& [ts, v] : pred->second) predicted = std::max(predicted, v);
  const double top = std::max<double>({1.0, double(peak), double(predicted)});
  auto x = [&](double us) { return kLeft + us / tl.end * kPlotW; };
  auto yv = [&](double v) { return y + kPanel - v / top * (kPanel - 10); };
  svg.text(kLeft - 8, y + 14, name, 11, "end", "font-weight=\"bold\"");
  svg.text(kLeft - 8, y + 28, format_bytes(std::max<uint64_t>({1, peak, predicted})), 10, "end", "fill=\"#555\"");
  svg.text(kLeft - 8, y + kPanel, "0", 10, "end", "fill=\"#555\"");
  svg.line(kLeft, y + kPanel, kLeft + kPlotW, y + kPanel, "stroke=\"#555\"");
  svg.line(kLeft, y + 10, kLeft, y + kPanel, "stroke=\"#555\"");
  // The highest value in each pixel column (peaks survive), as a step line.
  std::string pts;
  double last_px = -1;
  uint64_t col_max = 0;
  bool first = true;
  for (size_t i = 0; i < s.size(); ++i) {
    const double px = std::floor(x(s[i].first) * 2) / 2;
    if (first) {
      pts += Svg::point(px, yv(double(s[i].second)));
      last_px = px, col_max = s[i].second, first = false;
      continue;
    }
    if (px == last_px) {
      col_max = std::max(col_max, s[i].second);
      continue;
    }
    pts += Svg::point(last_px, yv(double(col_max))) + Svg::point(px, yv(double(col_max)));
    last_px = px, col_max = s[i].second;
  }
  if (!first) pts += Svg::point(last_px, yv(double(col_max))) + Svg::point(kLeft + kPlotW, yv(double(col_max)));
  svg.polyline(pts, "stroke=\"#2e75b6\" stroke-width=\"1.5\"");
  // The predicted peak's label in the half away from the measured peak's, so they never overlap.
  const bool right_half = x(peak_at) > kLeft + kPlotW / 2;
  if (pred != tl.counters.end()) {
    svg.line(kLeft, yv(double(predicted)), kLeft + kPlotW, yv(double(predicted)),
             "stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"");
    svg.text(right_half ? kLeft + 6 : kLeft + kPlotW, yv(double(predicted)) - 4, "predicted peak " + format_bytes(predicted), 11,
             right_half ? "start" : "end", "fill=\"#d62728\"");
  }
  svg.circle(x(peak_at), yv(double(peak)), 4, "fill=\"none\" stroke=\"#000\" stroke-width=\"1.5\"");
  svg.text(x(peak_at) + (right_half ? -8 : 8), yv(double(peak)) + (peak >= predicted ? 14 : -6),
           fmt::format("peak {} at {}", format_bytes(peak), seconds_text(peak_at)), 11, right_half ? "end" : "start");
  return y + kPanel + 24;
}

// Whether a counter and its prediction are 0 throughout (drawn as one line, not a panel).
bool zero_throughout(const Timeline& tl, const std::string& name, const std::vector<std::pair<double, uint64_t>>& s) {
  auto zero = [](const auto& samples) {
    return std::all_of(samples.begin(), samples.end(), [](const auto& p) { return p.second == 0; });
  };
  const auto pred = tl.counters.find(name + kPredicted);
  return zero(s) && (pred == tl.counters.end() || zero(pred->second));
}

double draw_all(Svg& svg, const Timeline& tl) {
  double y = draw_lanes(svg, tl, 62);
  y = draw_legend(svg, tl, y);
  std::string zeros;
  for (const auto& [name, s] : tl.counters) {
    if (name.ends_with(kPredicted)) continue;
    if (zero_throughout(tl, name, s)) zeros += (zeros.empty() ? "" : ", ") + name;
    else y = draw_counter(svg, tl, name, s, y);
  }
  if (!zeros.empty()) {
    svg.text(20, y, "0 B throughout (measured and predicted): " + zeros, 11, "start", "fill=\"#444\"");
    y += kLine + 6;
  }
  return y;
}

}  // namespace

std::string timeline_svg(const nlohmann::json& trace, const std::string& file) {
  const Timeline tl = read_timeline(trace, file);
  Svg dry(0, 0, "");
  const double height = draw_all(dry, tl);
  const std::string title = tl.process + (tl.path.empty() ? "" : ": " + tl.path);
  Svg svg(kWidth, height, title);
  svg.text(20, 24, title, 15, "start", "font-weight=\"bold\"");
  svg.text(20, 42, fmt::format("{} of phases and memory, sampled; dashed: predicted", seconds_text(tl.end)), 11, "start", "fill=\"#444\"");
  draw_all(svg, tl);
  return svg.str();
}

}  // namespace nunchaku
