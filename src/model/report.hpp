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
// Without `with_tensors`, "tensors" is an empty array for dump_inspect_json to fill.
nlohmann::json inspect_json(const Checkpoint& ck, const ModelLayout& layout, const std::string& filter = "",
                            bool with_tensors = true);

// dump_json(doc, 2) of inspect_json(ck, .., filter, false) plus members the caller added, with
// the "tensors" array written straight from `ck`: the text the full document would give, at a
// fraction of the cost for 100k tensors.
std::string dump_inspect_json(const nlohmann::json& doc, const Checkpoint& ck, const std::string& filter = "");

}  // namespace nunchaku
