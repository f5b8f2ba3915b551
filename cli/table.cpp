// Text tables laid out to a width (table.hpp).
#include "cli/table.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace nunchaku::cli {
namespace {

// Display columns of UTF-8 text (continuation bytes take none).
size_t columns_of(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string cell(const std::string& s, size_t w, bool left) {
  const size_t n = columns_of(s);
  const std::string pad(w > n ? w - n : 0, ' ');
  return left ? s + pad : pad + s;
}

}  // namespace

TableText layout_table(const std::vector<TableColumn>& columns, const std::vector<std::vector<std::string>>& rows, size_t width) {
  std::vector<size_t> w(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) {
    w[c] = columns_of(columns[c].header);
    for (const auto& r : rows)
      if (c < r.size()) w[c] = std::max(w[c], columns_of(r[c]));
  }
  std::vector<bool> shown(columns.size(), true);
  auto total = [&] {
    size_t t = 0, n = 0;
    for (size_t c = 0; c < columns.size(); ++c)
      if (shown[c]) t += w[c], ++n;
    return t + (n ? n - 1 : 0);
  };
  TableText out;
  // Droppable columns in their order (stable: equal ranks go right to left).
  std::vector<size_t> order;
  for (size_t c = columns.size(); c-- > 0;)
    if (columns[c].drop > 0) order.push_back(c);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return columns[a].drop < columns[b].drop; });
  for (size_t c : order) {
    if (total() <= width) break;
    shown[c] = false;
    out.dropped.push_back(columns[c].header);
  }
  auto line = [&](auto&& text_of) {
    std::string l;
    for (size_t c = 0; c < columns.size(); ++c) {
      if (!shown[c]) continue;
      if (!l.empty()) l += ' ';
      l += cell(text_of(c), w[c], columns[c].left);
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out.text += l + "\n";
  };
  line([&](size_t c) -> std::string { return columns[c].header; });
  for (const auto& r : rows) line([&](size_t c) -> std::string { return c < r.size() ? r[c] : ""; });
  return out;
}

std::string markdown_table(const std::vector<TableColumn>& columns, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(columns.size(), 3);  // "---" at least
  for (size_t c = 0; c < columns.size(); ++c) {
    w[c] = std::max(w[c], columns_of(columns[c].header));
    for (const auto& r : rows)
      if (c < r.size()) w[c] = std::max(w[c], columns_of(r[c]));
  }
  std::string out;
  auto line = [&](auto&& text_of) {
    for (size_t c = 0; c < columns.size(); ++c) out += "| " + text_of(c) + " ";
    out += "|\n";
  };
  line([&](size_t c) { return cell(columns[c].header, w[c], columns[c].left); });
  line([&](size_t c) { return columns[c].left ? std::string(w[c], '-') : std::string(w[c] - 1, '-') + ":"; });
  for (const auto& r : rows) line([&](size_t c) { return cell(c < r.size() ? r[c] : "", w[c], columns[c].left); });
  return out;
}

std::string dropped_note(const TableText& t, size_t width, const std::string& where_all) {
  if (t.dropped.empty()) return "";
  return fmt::format("({} left out to fit {} columns; {})", fmt::join(t.dropped, ", "), width, where_all);
}

}  // namespace nunchaku::cli
