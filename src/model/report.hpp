// The data behind `nunchaku inspect`: per-dtype totals, module rows, and the
// stable --json document (schema in docs/inspect-json.md).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/checkpoint.hpp"
#include "model/model.hpp"

namespace nunchaku {

struct DTypeTotals {
  uint64_t tensors = 0;
  uint64_t parameters = 0;
  uint64_t bytes = 0;
};

// Keyed by dtype name; only tensors whose name matches `filter` (glob, "" = all).
std::map<std::string, DTypeTotals> dtype_totals(const Checkpoint& ck, const std::string& filter = "");

// Shell-style glob match (fnmatch without FNM_PATHNAME: '*' crosses dots).
bool glob_match(const std::string& pattern, const std::string& name);

// The --json document. `filter` narrows "tensors" (and the totals reported for them).
nlohmann::json inspect_json(const Checkpoint& ck, const ModelLayout& layout, const std::string& filter = "");

}  // namespace nunchaku
