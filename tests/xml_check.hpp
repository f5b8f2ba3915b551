// A minimal XML reader for the tests: checks that a document nunchaku writes (its SVG
// pictures) is well-formed XML and returns its element tree. No XML parser is a dependency
// of the project, and what we write is a small subset, checked here in full:
//
//   an optional <?xml ...?> declaration, comments, elements with attributes in double or
//   single quotes (each name once per element), character data, the five predefined
//   entities and numeric character references (&#N; &#xN;), every element closed in order,
//   one root element, and no character XML 1.0 forbids (C0 controls other than tab, LF, CR).
//
// No DTDs, CDATA sections or processing instructions other than the declaration: a document
// that has them is refused (we never write them).
#pragma once

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace nunchaku::test {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;  // entities decoded
  std::string text;                          // character data directly inside, entities decoded
  std::vector<std::unique_ptr<XmlElement>> children;

  // Every element named `name` in this subtree (this one included), in document order.
  std::vector<const XmlElement*> find_all(const std::string& name) const;
  // All character data of the subtree, each element's text followed by its children's, joined by "\n".
  std::string all_text() const;
  const XmlElement* child(const std::string& name) const;  // first child so named, or null
};

// Throws std::runtime_error("xml: at byte N: what") when `doc` is not well-formed.
std::unique_ptr<XmlElement> parse_xml(const std::string& doc);

}  // namespace nunchaku::test
