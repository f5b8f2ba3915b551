// The one writer for pictures: a self-contained SVG document (no scripts, no external
// fonts or images, generic font families only), built element by element. Text reaches
// the markup through text(): printable() (core/text.hpp, the one escaping function for
// input-derived strings: invalid UTF-8 and control characters, which XML forbids, become
// visible escapes), then the five XML specials as entities. Coordinates are user units
// (pixels at 100 %), written with at most two decimals.
#pragma once

#include <string>
#include <string_view>

namespace nunchaku {

class Svg {
 public:
  // An SVG of width x height with a white background; `title` becomes <title>.
  Svg(double width, double height, std::string_view title);

  // `style`: presentation attributes as written ("fill=\"#4e79a7\" stroke=\"#000\"");
  // callers pass constants, never input-derived text. `tooltip` (may be "") becomes a <title>
  // child that browsers show on hover.
  void rect(double x, double y, double w, double h, std::string_view style, std::string_view tooltip = "");
  void line(double x1, double y1, double x2, double y2, std::string_view style);
  void circle(double cx, double cy, double r, std::string_view style);
  // A polyline through "x,y" points, already formatted by point().
  void polyline(std::string_view points, std::string_view style);
  // `anchor`: "start", "middle" or "end".
  void text(double x, double y, std::string_view s, double size = 12, std::string_view anchor = "start",
            std::string_view style = "");

  // "x,y " for polyline().
  static std::string point(double x, double y);
  // `s` as XML character data or attribute value: printable(s, kMessageShown), then & < > " '.
  static std::string escape(std::string_view s);
  // The finished document (ends with a newline).
  std::string str() const;

 private:
  std::string body_;
  double width_, height_;
  std::string title_;
};

}  // namespace nunchaku
