// The one text table of the CLI (plan's devices, inspect's modules, bench's results): columns
// sized to their cells, one space apart, laid out to a width, or as a Markdown table. When the table is wider than the width, the
// columns marked droppable go first (lowest `drop` first) until it fits; what was left out is
// named so the caller can say so. Cells are never cut: a name wider than the width stays
// whole and pushes its row past it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace nunchaku::cli {

struct TableColumn {
  std::string header;
  bool left = false;  // left-aligned (names); numbers are right-aligned
  int drop = 0;       // 0: always shown; 1, 2, ...: left out in this order when too wide
};

struct TableText {
  std::string text;                  // header line, then one line per row, each ending in '\n'
  std::vector<std::string> dropped;  // headers of the columns left out, in the order they went
};

TableText layout_table(const std::vector<TableColumn>& columns, const std::vector<std::vector<std::string>>& rows,
                       size_t width);

// The same columns as a Markdown table (bench, as llama-bench prints it): "| a | b |" lines,
// cells padded to their column, the second line "| --- | ---: |" (numbers right-aligned).
// Never laid out to a width: it is meant to be pasted.
std::string markdown_table(const std::vector<TableColumn>& columns, const std::vector<std::vector<std::string>>& rows);

// "(left out to fit 80 columns: budget, activations; --json has every column)", or "".
std::string dropped_note(const TableText& t, size_t width, const std::string& where_all);

}  // namespace nunchaku::cli
