// A small JSON Schema validator for the tests: checks nunchaku's JSON documents against
// docs/schema/<command>.json. There is no packaged C++ validator, and the schemas use a
// subset of draft 2020-12 small enough to check here in full:
//
//   type (a name or a list; "integer" is a JSON number written without a fraction or
//   exponent: 1.0 is not an integer here, which is stricter than the draft and what our
//   writers promise), enum, const, required, properties, additionalProperties (false or a
//   schema), items, minItems, maxItems, minimum, maximum, minLength, pattern (ECMAScript,
//   unanchored as in the draft: write ^...$), oneOf, anyOf, $ref ("#/$defs/NAME" only), $defs.
//
// Annotations ($schema, $id, $comment, title, description, default, examples) are ignored.
// Any other keyword makes the schema itself invalid (std::invalid_argument naming it), so a
// schema cannot lean on a keyword this checker would silently skip.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nunchaku::test {

// Every violation of `schema` by `doc`, each "POINTER: what is wrong", where POINTER is the
// JSON pointer of the offending value ("/devices/0/budget"; "" is the root). Empty when
// `doc` is valid. Throws std::invalid_argument when the schema uses an unknown keyword or a
// $ref that does not resolve.
std::vector<std::string> schema_errors(const nlohmann::json& schema, const nlohmann::json& doc);

}  // namespace nunchaku::test
