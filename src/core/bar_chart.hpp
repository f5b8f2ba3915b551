// Stacked bars of byte counts (one bar per device, bars in groups side by side), drawn as
// one SVG through core/svg.hpp: each segment a rectangle whose height is its bytes on one
// scale shared by every bar, labelled beside the bar with its name and size; a budget line
// across the bar with the headroom or shortfall under it. Every segment's <rect> carries
// data-bytes (its exact byte count) and a tooltip with the exact figure, so a checker can
// read the numbers back and compare them with the heights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nunchaku {

struct BarSegment {
  std::string name;   // "weights: layers 0-11", "kv_cache", ...
  uint64_t bytes = 0;
};

struct Bar {
  std::string label;                 // "cuda:0", "per GPU", "cpu"
  std::vector<BarSegment> segments;  // bottom to top
  std::optional<uint64_t> budget;    // none: no budget line (disk, estimate without --vram)
  uint64_t total() const;
};

struct BarGroup {
  std::string label;  // "nunchaku", "vllm", ... ("" for a single group)
  std::vector<Bar> bars;
};

struct BarChart {
  std::string title;      // first line over the chart
  std::string subtitle;   // second line (workload), may be ""
  std::vector<BarGroup> groups;
  std::vector<std::string> notes;  // lines under the chart
};

// Plot height in user units of the tallest bar or budget (the scale's full height).
inline constexpr double kBarPlotHeight = 360;

std::string bar_chart_svg(const BarChart& c);

// The fill colour of a segment by its name: one colour per component kind (every
// "weights: ..." segment a shade of blue), the same in every picture.
std::string segment_colour(const std::string& name, size_t index_in_bar);

}  // namespace nunchaku
