#include "core/svg.hpp"

#include <fmt/format.h>

#include "core/text.hpp"

namespace nunchaku {
namespace {

// Two decimals, trailing zeros dropped: "12", "12.5", "-0.25".
std::string num(double v) {
  std::string s = fmt::format("{:.2f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

}  // namespace

Svg::Svg(double width, double height, std::string_view title) : width_(width), height_(height), title_(title) {}

std::string Svg::escape(std::string_view s) {
  const std::string shown = printable(s, kMessageShown);
  std::string out;
  out.reserve(shown.size());
  for (char c : shown) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string Svg::point(double x, double y) { return num(x) + "," + num(y) + " "; }

void Svg::rect(double x, double y, double w, double h, std::string_view style, std::string_view tooltip) {
  body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" {}", num(x), num(y), num(std::max(0.0, w)),
                       num(std::max(0.0, h)), style);
  if (tooltip.empty()) body_ += "/>\n";
  else body_ += fmt::format("><title>{}</title></rect>\n", escape(tooltip));
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view style) {
  body_ += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {}/>\n", num(x1), num(y1), num(x2), num(y2), style);
}

void Svg::circle(double cx, double cy, double r, std::string_view style) {
  body_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" {}/>\n", num(cx), num(cy), num(r), style);
}

void Svg::polyline(std::string_view points, std::string_view style) {
  body_ += fmt::format("<polyline fill=\"none\" points=\"{}\" {}/>\n", points, style);
}

void Svg::text(double x, double y, std::string_view s, double size, std::string_view anchor, std::string_view style) {
  body_ += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{}\" {}>{}</text>\n", num(x), num(y), num(size),
                       anchor, style, escape(s));
}

std::string Svg::str() const {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, Verdana, sans-serif\">\n"
      "<title>{2}</title>\n<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n{3}</svg>\n",
      num(width_), num(height_), escape(title_), body_);
}

}  // namespace nunchaku
