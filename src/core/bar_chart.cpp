#include "core/bar_chart.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/svg.hpp"
#include "core/units.hpp"

namespace nunchaku {
namespace {

// Layout in user units.
constexpr double kLeft = 90, kTop = 64, kBarWidth = 56, kLabelGap = 10, kLabelColumn = 200, kGroupGap = 36;
constexpr double kLine = 14;  // one line of 11-12 px text

double slot_width() { return kBarWidth + kLabelGap + kLabelColumn; }

struct Scale {
  double max_bytes = 1;
  double y(double bytes) const { return kTop + kBarPlotHeight - bytes / max_bytes * kBarPlotHeight; }
  double h(double bytes) const { return bytes / max_bytes * kBarPlotHeight; }
};

Scale scale_of(const BarChart& c) {
  Scale s;
  for (const auto& g : c.groups)
    for (const auto& b : g.bars) s.max_bytes = std::max({s.max_bytes, double(b.total()), b.budget ? double(*b.budget) : 0.0});
  return s;
}

void draw_axis(Svg& svg, const Scale& s) {
  svg.line(kLeft - 12, kTop, kLeft - 12, kTop + kBarPlotHeight, "stroke=\"#555\"");
  for (int i = 0; i <= 4; ++i) {
    const double bytes = s.max_bytes * i / 4, y = s.y(bytes);
    svg.line(kLeft - 16, y, kLeft - 12, y, "stroke=\"#555\"");
    svg.text(kLeft - 19, y + 4, format_bytes(uint64_t(bytes)), 10, "end", "fill=\"#555\"");
  }
}

// Label positions beside a bar: each at its segment's middle, pushed down so no two overlap
// (top segment first). Returns the lowest label's baseline.
double draw_bar(Svg& svg, const Scale& s, const Bar& b, double x) {
  double base = kTop + kBarPlotHeight, lowest = base;
  struct Label { double mid; std::string text; };
  std::vector<Label> labels;
  uint64_t below = 0;
  size_t k = 0;
  for (const auto& seg : b.segments) {
    if (seg.bytes == 0) continue;
    const double top = s.y(double(below + seg.bytes)), h = s.h(double(seg.bytes));
    svg.rect(x, top, kBarWidth, h,
             fmt::format("fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"0.5\" data-bytes=\"{}\"", segment_colour(seg.name, k++), seg.bytes),
             fmt::format("{}: {}: {} ({} B)", b.label, seg.name, format_bytes(seg.bytes), seg.bytes));
    labels.push_back({top + h / 2, fmt::format("{} {}", seg.name, format_bytes(seg.bytes))});
    below += seg.bytes;
  }
  double next = kTop - 4;  // labels start no higher than the plot's top
  for (auto it = labels.rbegin(); it != labels.rend(); ++it) {
    const double y = std::max(it->mid + 4, next);
    next = y + kLine - 2;
    const double lx = x + kBarWidth + kLabelGap;
    svg.line(x + kBarWidth, it->mid, lx - 2, y - 4, "stroke=\"#999\" stroke-width=\"0.5\"");
    svg.text(lx, y, it->text, 11);
    lowest = std::max(lowest, y);
  }
  svg.text(x, s.y(double(b.total())) - 6, "total " + format_bytes(b.total()), 11, "start", "font-weight=\"bold\"");
  double y = lowest + kLine + 6;
  svg.text(x, y, b.label, 12, "start", "font-weight=\"bold\"");
  if (b.budget) {
    const double by = s.y(double(*b.budget));
    svg.line(x - 6, by, x + kBarWidth + 6, by, "stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"5,3\"");
    y += kLine;
    svg.text(x, y, "budget " + format_bytes(*b.budget), 11, "start", "fill=\"#d62728\"");
    y += kLine;
    const uint64_t t = b.total();
    if (t <= *b.budget) svg.text(x, y, "headroom " + format_bytes(*b.budget - t), 11, "start", "fill=\"#2ca02c\"");
    else svg.text(x, y, "short by " + format_bytes(t - *b.budget), 11, "start", "fill=\"#d62728\" font-weight=\"bold\"");
  }
  return y;
}

// Where each group's bars and labels go, and how tall everything under the plot is: drawn
// twice (a dry run sizes the canvas), since the SVG's size comes first in the document.
double draw_all(Svg& svg, const BarChart& c, const Scale& s) {
  double x = kLeft, bottom = kTop + kBarPlotHeight;
  for (const auto& g : c.groups) {
    const double x0 = x;
    double gb = kTop + kBarPlotHeight;
    for (const auto& b : g.bars) {
      gb = std::max(gb, draw_bar(svg, s, b, x));
      x += slot_width();
    }
    if (!g.label.empty()) {
      gb += kLine + 8;
      svg.text(x0 + (x - x0 - kLabelColumn) / 2, gb, g.label, 13, "middle", "font-weight=\"bold\"");
    }
    bottom = std::max(bottom, gb);
    x += kGroupGap;
  }
  svg.line(kLeft - 12, kTop + kBarPlotHeight, x - kGroupGap, kTop + kBarPlotHeight, "stroke=\"#555\"");
  double y = bottom + kLine + 6;
  for (const auto& n : c.notes) {
    svg.text(kLeft - 70, y, n, 11, "start", "fill=\"#444\"");
    y += kLine;
  }
  return y;
}

}  // namespace

uint64_t Bar::total() const {
  uint64_t t = 0;
  for (const auto& s : segments) t += s.bytes;
  return t;
}

std::string segment_colour(const std::string& name, size_t index_in_bar) {
  auto has = [&](const char* w) { return name.find(w) != std::string::npos; };
  static const char* const blues[] = {"#1f4e79", "#2e75b6", "#5b9bd5", "#9dc3e6"};
  static const char* const greys[] = {"#8c8c8c", "#bab0ac", "#6b6b6b", "#d0cbc8"};
  if (has("weights")) return blues[index_in_bar % 4];
  if (has("kv")) return "#f28e2b";
  if (has("activation")) return "#59a14f";
  if (has("logits")) return "#b07aa1";
  if (has("gradient") || has("optimizer") || has("master") || has("adapter") || has("train")) return "#e15759";
  if (has("staging") || has("stream")) return "#9c755f";
  return greys[index_in_bar % 4];
}

std::string bar_chart_svg(const BarChart& c) {
  const Scale s = scale_of(c);
  double width = kLeft + 20;
  for (const auto& g : c.groups) width += double(g.bars.size()) * slot_width() + kGroupGap;
  for (const auto& n : c.notes) width = std::max(width, 40 + 6.2 * double(n.size()));
  Svg dry(0, 0, "");
  const double height = draw_all(dry, c, s) + 10;
  Svg svg(width, height, c.title);
  svg.text(20, 26, c.title, 15, "start", "font-weight=\"bold\"");
  if (!c.subtitle.empty()) svg.text(20, 44, c.subtitle, 11, "start", "fill=\"#444\"");
  draw_axis(svg, s);
  draw_all(svg, c, s);
  return svg.str();
}

}  // namespace nunchaku
