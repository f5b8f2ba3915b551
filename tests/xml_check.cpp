#include "tests/xml_check.hpp"

#include <cctype>
#include <cstdint>

namespace nunchaku::test {
namespace {

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}

  std::unique_ptr<XmlElement> document() {
    check_chars();
    if (s_.compare(0, 5, "<?xml") == 0) {
      size_t e = s_.find("?>");
      if (e == std::string::npos) fail("unterminated XML declaration");
      i_ = e + 2;
    }
    misc();
    if (!at('<')) fail("no root element");
    auto root = element();
    misc();
    if (i_ != s_.size()) fail("content after the root element");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("xml: at byte " + std::to_string(i_) + ": " + what);
  }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  bool starts(const char* p) const { return s_.compare(i_, std::char_traits<char>::length(p), p) == 0; }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void check_chars() {
    for (size_t k = 0; k < s_.size(); ++k) {
      const auto c = static_cast<unsigned char>(s_[k]);
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
        i_ = k;
        fail("a control character XML forbids");
      }
    }
  }
  // Comments and white space between top-level items.
  void misc() {
    for (;;) {
      space();
      if (starts("<!--")) comment();
      else return;
    }
  }
  void comment() {
    size_t e = s_.find("-->", i_ + 4);
    if (e == std::string::npos) fail("unterminated comment");
    i_ = e + 3;
  }
  static bool name_char(char c, bool first) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u) || c == '_' || c == ':' || u >= 0x80) return true;
    return !first && (std::isdigit(u) || c == '-' || c == '.');
  }
  std::string name() {
    size_t b = i_;
    if (i_ >= s_.size() || !name_char(s_[i_], true)) fail("a name expected");
    while (i_ < s_.size() && name_char(s_[i_], false)) ++i_;
    return s_.substr(b, i_ - b);
  }
  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800) out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    else if (cp < 0x10000) out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    else
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F)), out += char(0x80 | ((cp >> 6) & 0x3F)),
          out += char(0x80 | (cp & 0x3F));
  }
  // At '&': one entity or character reference, decoded into `out`.
  void reference(std::string& out) {
    size_t e = s_.find(';', i_);
    if (e == std::string::npos || e - i_ > 12) fail("unterminated entity");
    const std::string ent = s_.substr(i_ + 1, e - i_ - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x';
      const std::string digits = ent.substr(hex ? 2 : 1);
      if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos)
        fail("bad character reference &" + ent + ";");
      const unsigned long cp = std::stoul(digits, nullptr, hex ? 16 : 10);
      if (cp == 0 || cp > 0x10FFFF || (cp < 0x20 && cp != 9 && cp != 10 && cp != 13)) fail("character reference to a forbidden character");
      put_utf8(out, uint32_t(cp));
    } else {
      fail("unknown entity &" + ent + ";");
    }
    i_ = e + 1;
  }
  std::string attr_value() {
    if (!at('"') && !at('\'')) fail("an attribute value must be quoted");
    const char q = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '<') fail("'<' inside an attribute value");
      if (s_[i_] == '&') reference(out);
      else out += s_[i_++];
    }
    if (i_ >= s_.size()) fail("unterminated attribute value");
    ++i_;
    return out;
  }
  std::unique_ptr<XmlElement> element() {
    ++i_;  // '<'
    auto el = std::make_unique<XmlElement>();
    el->name = name();
    for (;;) {
      const size_t before = i_;
      space();
      if (starts("/>")) {
        i_ += 2;
        return el;
      }
      if (at('>')) {
        ++i_;
        break;
      }
      if (i_ == before) fail("white space expected before an attribute");
      std::string a = name();
      space();
      if (!at('=')) fail("'=' expected after attribute " + a);
      ++i_;
      space();
      if (!el->attrs.emplace(a, attr_value()).second) fail("attribute " + a + " given twice");
    }
    content(*el);
    return el;
  }
  void content(XmlElement& el) {
    for (;;) {
      if (i_ >= s_.size()) fail("element <" + el.name + "> is not closed");
      if (starts("</")) {
        i_ += 2;
        if (name() != el.name) fail("closing tag does not match <" + el.name + ">");
        space();
        if (!at('>')) fail("'>' expected");
        ++i_;
        return;
      }
      if (starts("<!--")) comment();
      else if (starts("<!") || starts("<?")) fail("CDATA, DTDs and processing instructions are not written by nunchaku");
      else if (at('<')) el.children.push_back(element());
      else if (at('&')) reference(el.text);
      else if (at('>') && i_ >= 2 && s_.compare(i_ - 2, 2, "]]") == 0) fail("']]>' in character data");
      else el.text += s_[i_++];
    }
  }

  const std::string& s_;
  size_t i_ = 0;
};

void collect(const XmlElement& e, const std::string& name, std::vector<const XmlElement*>& out) {
  if (e.name == name) out.push_back(&e);
  for (const auto& c : e.children) collect(*c, name, out);
}

}  // namespace

std::vector<const XmlElement*> XmlElement::find_all(const std::string& n) const {
  std::vector<const XmlElement*> out;
  collect(*this, n, out);
  return out;
}

std::string XmlElement::all_text() const {
  std::string out = text;
  for (const auto& c : children) out += "\n" + c->all_text();
  return out;
}

const XmlElement* XmlElement::child(const std::string& n) const {
  for (const auto& c : children)
    if (c->name == n) return c.get();
  return nullptr;
}

std::unique_ptr<XmlElement> parse_xml(const std::string& doc) { return Reader(doc).document(); }

}  // namespace nunchaku::test
