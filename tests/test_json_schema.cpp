// The JSON Schema checker the contract tests use (tests/json_schema_check.hpp), tested on
// hand-written documents: each bad one is rejected, naming the offending value's pointer.
#include <set>

#include <catch2/catch.hpp>

#include "tests/json_schema_check.hpp"

using nlohmann::json;
using nunchaku::test::schema_errors;

namespace {

// A plan-like document: fixed-shape objects, a map with typed values, nullable fields,
// a tuple-ish array, an enum, a $ref and a oneOf.
const json kSchema = json::parse(R"({
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "test",
  "type": "object",
  "required": ["command", "fits", "devices", "modules"],
  "additionalProperties": false,
  "properties": {
    "command": {"const": "plan"},
    "fits": {"type": "boolean"},
    "note": {"type": ["string", "null"], "minLength": 1},
    "modules": {"type": "object", "additionalProperties": {"$ref": "#/$defs/device"}},
    "devices": {"type": "array", "minItems": 1, "items": {
      "type": "object", "required": ["device", "budget_bytes"], "additionalProperties": false,
      "properties": {
        "device": {"$ref": "#/$defs/device"},
        "budget_bytes": {"type": ["integer", "null"], "minimum": 0},
        "layer_range": {"oneOf": [{"type": "null"},
                                  {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}]},
        "load": {"type": "number", "minimum": 0, "maximum": 1}
      }}},
    "kind": {"enum": ["a", "b"]},
    "either": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 10}]}
  },
  "$defs": {"device": {"anyOf": [{"enum": ["cpu", "disk"]}, {"type": "string", "pattern": "^cuda:[0-9]+$"}]}}
})");

const json kGood = json::parse(R"({
  "command": "plan", "fits": true, "note": null,
  "modules": {"model.layers.0": "cuda:0", "lm_head": "cpu", "a/b~c": "disk"},
  "devices": [{"device": "cuda:0", "budget_bytes": 1024, "layer_range": [0, 3], "load": 0.5},
              {"device": "cpu", "budget_bytes": null, "layer_range": null}],
  "kind": "b", "either": 12
})");

// `doc` with the value at `ptr` replaced (or removed when `v` is discarded).
json with(const std::string& ptr, const json& v) {
  json d = kGood;
  d[json::json_pointer(ptr)] = v;
  return d;
}
json without(const std::string& ptr) {
  json d = kGood;
  auto p = json::json_pointer(ptr);
  d[p.parent_pointer()].erase(p.back());
  return d;
}

// Exactly one error, and it starts with the pointer.
void rejected_at(const json& doc, const std::string& ptr, const std::string& words) {
  auto errs = schema_errors(kSchema, doc);
  INFO(doc.dump());
  REQUIRE(errs.size() == 1);
  CHECK(errs[0].rfind(ptr + ": ", 0) == 0);
  CHECK_THAT(errs[0], Catch::Contains(words));
}

}  // namespace

TEST_CASE("json schema check: a document that follows the schema has no errors", "[json][schema]") {
  CHECK(schema_errors(kSchema, kGood).empty());
  CHECK(schema_errors(kSchema, without("/note")).empty());          // optional
  CHECK(schema_errors(kSchema, with("/either", "text")).empty());   // the other anyOf branch
  CHECK(schema_errors(kSchema, with("/modules", json::object())).empty());
  CHECK(schema_errors(kSchema, with("/devices/0/budget_bytes", uint64_t(1) << 63)).empty());  // unsigned 64-bit
}

TEST_CASE("json schema check: each broken rule names the offending value's pointer", "[json][schema]") {
  rejected_at(with("/command", "load"), "/command", "is not \"plan\"");
  rejected_at(with("/fits", 1), "/fits", "where \"boolean\" is expected");
  rejected_at(without("/devices"), "/devices", "missing (required)");
  rejected_at(without("/devices/1/budget_bytes"), "/devices/1/budget_bytes", "missing (required)");
  rejected_at(with("/extra", 1), "/extra", "additionalProperties");
  rejected_at(with("/devices/0/bytes", 1), "/devices/0/bytes", "additionalProperties");
  rejected_at(with("/devices/0/budget_bytes", -1), "/devices/0/budget_bytes", "below the minimum 0");
  rejected_at(with("/devices/0/budget_bytes", 1.0), "/devices/0/budget_bytes", "number (with a fraction)");
  rejected_at(with("/devices/0/budget_bytes", "1G"), "/devices/0/budget_bytes", "string where");
  rejected_at(with("/devices/1/device", "gpu"), "/devices/1/device", "does not match \"^cuda:[0-9]+$\"");
  rejected_at(with("/modules/lm_head", "cuda:x"), "/modules/lm_head", "matches none of the 2 alternatives");
  rejected_at(with("/modules/lm_head", "my cuda:1"), "/modules/lm_head", "does not match");  // anchored by ^
  rejected_at(with("/modules/a~1b~0c", 3), "/modules/a~1b~0c", "3 is not one of");  // RFC 6901 escapes
  rejected_at(with("/devices/0/layer_range", json::array({0})), "/devices/0/layer_range", "matches none");
  rejected_at(with("/devices/0/layer_range", json::array({0, 1, 2})), "/devices/0/layer_range", "matches none");
  rejected_at(with("/devices/0/layer_range/1", "3"), "/devices/0/layer_range", "matches none");
  rejected_at(with("/devices/0/load", 1.5), "/devices/0/load", "above the maximum 1");
  rejected_at(with("/devices", json::array()), "/devices", "fewer than 1");
  rejected_at(with("/kind", "c"), "/kind", "is not one of [\"a\",\"b\"]");
  rejected_at(with("/either", 3), "/either", "matches none of the 2 alternatives");
  rejected_at(with("/note", ""), "/note", "shorter than 1");
  rejected_at(json::array(), "", "array where \"object\" is expected");
}

TEST_CASE("json schema check: every error is reported, not only the first", "[json][schema]") {
  json d = with("/fits", "yes");
  d["devices"][1]["budget_bytes"] = "7";
  d.erase("command");
  auto errs = schema_errors(kSchema, d);
  REQUIRE(errs.size() == 3);
  std::set<std::string> at;
  for (const auto& e : errs) at.insert(e.substr(0, e.find(": ")));
  CHECK(at == std::set<std::string>{"/command", "/fits", "/devices/1/budget_bytes"});
}

TEST_CASE("json schema check: a schema with a keyword it does not check is refused, not half-applied", "[json][schema]") {
  // "format" deep inside a property the document never has: refused all the same.
  json s = kSchema;
  s["properties"]["note"]["format"] = "date";
  CHECK_THROWS_WITH(schema_errors(s, kGood), Catch::Contains("unsupported keyword 'format'"));
  json r = kSchema;
  r["properties"]["kind"] = {{"$ref", "#/$defs/nothing"}};
  CHECK_THROWS_WITH(schema_errors(r, kGood), Catch::Contains("names no definition"));
  json t = kSchema;
  t["properties"]["kind"] = {{"type", "int"}};
  CHECK_THROWS_WITH(schema_errors(t, kGood), Catch::Contains("unknown type 'int'"));
}
