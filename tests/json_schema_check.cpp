#include "tests/json_schema_check.hpp"

#include <regex>
#include <set>
#include <stdexcept>

namespace nunchaku::test {
namespace {

using nlohmann::json;

const std::set<std::string> kAnnotations = {"$schema", "$id", "$comment", "title", "description", "default", "examples"};
const std::set<std::string> kKeywords = {"type",    "enum",     "const",   "required", "properties", "additionalProperties",
                                         "items",   "minItems", "maxItems", "minimum", "maximum",    "minLength", "pattern",
                                         "oneOf",   "anyOf",    "$ref",    "$defs"};

// RFC 6901: "~" -> "~0", "/" -> "~1".
std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

bool has_type(const json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer();
  throw std::invalid_argument("schema: unknown type '" + type + "'");
}

class Checker {
 public:
  explicit Checker(const json& root) : root_(root) {}

  // The schema itself, every subschema included (not only those a document reaches): known
  // keywords only, and every $ref resolves.
  void check_schema(const json& schema, const std::string& where) const {
    if (schema.is_boolean()) return;
    if (!schema.is_object()) throw std::invalid_argument("schema at " + where + " is neither an object nor a boolean");
    for (const auto& [k, x] : schema.items()) {
      if (!kKeywords.count(k) && !kAnnotations.count(k))
        throw std::invalid_argument("schema at " + where + ": unsupported keyword '" + k + "'");
      if (k == "properties" || k == "$defs")
        for (const auto& [name, sub] : x.items()) check_schema(sub, where + "/" + k + "/" + pointer_token(name));
      else if (k == "oneOf" || k == "anyOf")
        for (size_t i = 0; i < x.size(); ++i) check_schema(x[i], where + "/" + k + "/" + std::to_string(i));
      else if (k == "items" || k == "additionalProperties") check_schema(x, where + "/" + k);
      else if (k == "$ref") resolve(x.get<std::string>());
      else if (k == "type")
        for (const auto& name : x.is_array() ? x : json::array({x})) has_type(nullptr, name.get<std::string>());  // throws on a typo
    }
  }

  void check(const json& schema, const json& v, const std::string& at, std::vector<std::string>& errs) const {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) errs.push_back(at + ": not allowed here (schema false)");
      return;
    }
    if (schema.contains("$ref")) check(resolve(schema["$ref"].get<std::string>()), v, at, errs);
    if (schema.contains("type")) check_type(schema["type"], v, at, errs);
    if (schema.contains("enum")) {
      bool found = false;
      for (const auto& e : schema["enum"]) found = found || same(e, v);
      if (!found) errs.push_back(at + ": " + v.dump() + " is not one of " + schema["enum"].dump());
    }
    if (schema.contains("const") && !same(schema["const"], v))
      errs.push_back(at + ": " + v.dump() + " is not " + schema["const"].dump());
    if (v.is_number()) check_number(schema, v, at, errs);
    if (v.is_string() && schema.contains("minLength") && v.get<std::string>().size() < schema["minLength"].get<size_t>())
      errs.push_back(at + ": shorter than " + schema["minLength"].dump() + " bytes");
    if (v.is_string() && schema.contains("pattern") &&
        !std::regex_search(v.get<std::string>(), std::regex(schema["pattern"].get<std::string>(), std::regex::ECMAScript)))
      errs.push_back(at + ": " + v.dump() + " does not match " + schema["pattern"].dump());
    if (v.is_object()) check_object(schema, v, at, errs);
    if (v.is_array()) check_array(schema, v, at, errs);
    if (schema.contains("anyOf")) check_alternatives(schema["anyOf"], v, at, errs, false);
    if (schema.contains("oneOf")) check_alternatives(schema["oneOf"], v, at, errs, true);
  }

 private:
  const json& resolve(const std::string& ref) const {
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) != 0) throw std::invalid_argument("schema: $ref '" + ref + "' is not #/$defs/NAME");
    const std::string name = ref.substr(prefix.size());
    if (!root_.contains("$defs") || !root_["$defs"].contains(name))
      throw std::invalid_argument("schema: $ref '" + ref + "' names no definition");
    return root_["$defs"][name];
  }

  // 1 and 1u are the same value; 1 and 1.0 are not (see the header on integers).
  static bool same(const json& a, const json& b) {
    if (a.is_number_integer() && b.is_number_integer()) return a.get<int64_t>() == b.get<int64_t>();
    return a == b;
  }

  static void check_type(const json& t, const json& v, const std::string& at, std::vector<std::string>& errs) {
    std::vector<std::string> names;
    if (t.is_string()) names.push_back(t.get<std::string>());
    else for (const auto& x : t) names.push_back(x.get<std::string>());
    for (const auto& n : names)
      if (has_type(v, n)) return;
    errs.push_back(at + ": " + std::string(v.type_name()) + (v.is_number_float() ? " (with a fraction)" : "") + " where " +
                   t.dump() + " is expected");
  }

  static void check_number(const json& schema, const json& v, const std::string& at, std::vector<std::string>& errs) {
    const double x = v.get<double>();
    if (schema.contains("minimum") && x < schema["minimum"].get<double>())
      errs.push_back(at + ": " + v.dump() + " is below the minimum " + schema["minimum"].dump());
    if (schema.contains("maximum") && x > schema["maximum"].get<double>())
      errs.push_back(at + ": " + v.dump() + " is above the maximum " + schema["maximum"].dump());
  }

  void check_object(const json& schema, const json& v, const std::string& at, std::vector<std::string>& errs) const {
    if (schema.contains("required"))
      for (const auto& r : schema["required"])
        if (!v.contains(r.get<std::string>())) errs.push_back(at + "/" + pointer_token(r.get<std::string>()) + ": missing (required)");
    const json* props = schema.contains("properties") ? &schema["properties"] : nullptr;
    for (const auto& [k, x] : v.items()) {
      const std::string here = at + "/" + pointer_token(k);
      if (props && props->contains(k)) check((*props)[k], x, here, errs);
      else if (schema.contains("additionalProperties") && schema["additionalProperties"] == false)
        errs.push_back(here + ": not a field of this object (additionalProperties is false)");
      else if (schema.contains("additionalProperties")) check(schema["additionalProperties"], x, here, errs);
    }
  }

  void check_array(const json& schema, const json& v, const std::string& at, std::vector<std::string>& errs) const {
    if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>())
      errs.push_back(at + ": " + std::to_string(v.size()) + " items, fewer than " + schema["minItems"].dump());
    if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>())
      errs.push_back(at + ": " + std::to_string(v.size()) + " items, more than " + schema["maxItems"].dump());
    if (schema.contains("items"))
      for (size_t i = 0; i < v.size(); ++i) check(schema["items"], v[i], at + "/" + std::to_string(i), errs);
  }

  void check_alternatives(const json& alts, const json& v, const std::string& at, std::vector<std::string>& errs, bool one) const {
    size_t matched = 0;
    std::string why;
    for (size_t i = 0; i < alts.size(); ++i) {
      std::vector<std::string> e;
      check(alts[i], v, at, e);
      if (e.empty()) ++matched;
      else why += (why.empty() ? "" : "; ") + std::to_string(i) + ": " + e.front();
    }
    if (matched == 0) errs.push_back(at + ": matches none of the " + std::to_string(alts.size()) + " alternatives (" + why + ")");
    else if (one && matched > 1) errs.push_back(at + ": matches " + std::to_string(matched) + " of oneOf's alternatives, not exactly one");
  }

  const json& root_;
};

}  // namespace

std::vector<std::string> schema_errors(const nlohmann::json& schema, const nlohmann::json& doc) {
  std::vector<std::string> errs;
  Checker c(schema);
  c.check_schema(schema, "#");
  c.check(schema, doc, "", errs);
  return errs;
}

}  // namespace nunchaku::test
