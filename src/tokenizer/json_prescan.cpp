#include "tokenizer/json_prescan.hpp"

#include <iterator>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace nunchaku {

namespace {

// A char iterator that publishes how far the parser has read, so the handler can say
// where a value is (nlohmann's SAX events carry no position).
struct TrackedIter {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  size_t* read = nullptr;  // bytes consumed so far, from the text's start
  const char* base = nullptr;
  reference operator*() const { return *p; }
  TrackedIter& operator++() {
    ++p;
    *read = static_cast<size_t>(p - base);
    return *this;
  }
  TrackedIter operator++(int) {
    TrackedIter old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackedIter& o) const { return p == o.p; }
  bool operator!=(const TrackedIter& o) const { return p != o.p; }
};

// Which counted field a container is.
enum class Field { Other, Root, Model, Vocab, Merges, Added };

struct Frame {
  Field field;
  bool object;
  uint64_t count = 0;        // direct children so far
  std::string key;           // the current member's key (objects), cut to 64 bytes
  Field child = Field::Other;  // what a container value of the current member would be
};

class Counter : public nlohmann::json_sax<nlohmann::json> {
 public:
  Counter(std::string_view text, const std::string& name, const size_t& read) : text_(text), name_(name), read_(read) {}

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t& s) override {
    count();
    check_string(s, "string", frames_.size());
    mark_ = read_;
    return true;
  }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    check_string(k, "key", frames_.size() - 1);
    key_at_ = start();
    Frame& f = frames_.back();
    f.key.assign(k, 0, 64);
    f.child = Field::Other;
    if (f.field == Field::Root) f.child = k == "model" ? Field::Model : k == "added_tokens" ? Field::Added : Field::Other;
    if (f.field == Field::Model) f.child = k == "vocab" ? Field::Vocab : k == "merges" ? Field::Merges : Field::Other;
    mark_ = read_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    // nlohmann counts from 1 (the byte it stopped at); offsets here count from 0.
    throw Error("tokenizer.bad_json", std::string("not valid JSON: ") + e.what(),
                {name_, "", position > 0 ? position - 1 : 0, ""});
  }

 private:
  std::string_view text_;
  const std::string& name_;
  const size_t& read_;
  size_t mark_ = 0;    // bytes read when the previous event ended
  size_t key_at_ = 0;  // offset of the current member's key
  uint64_t values_ = 0;
  std::vector<Frame> frames_;

  // Offset of the value (or key) the parser has just read: the first byte after the
  // previous event that is not whitespace or a separator.
  uint64_t start() const {
    size_t i = mark_;
    while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t' || text_[i] == '\n' || text_[i] == '\r' ||
                                text_[i] == ',' || text_[i] == ':'))
      ++i;
    return i;
  }

  // "model.merges[3]": the member or element each of the first `n` frames is in.
  std::string path(size_t n) const {
    std::string p;
    for (size_t i = 0; i < n; ++i) {
      const Frame& f = frames_[i];
      if (f.object) p += (p.empty() ? "" : ".") + f.key;
      else p += "[" + std::to_string(f.count - 1) + "]";
    }
    return p.empty() ? "the top level" : p;
  }

  [[noreturn]] void too_large(const std::string& what, uint64_t at) const {
    throw Error("tokenizer.too_large", what, {name_, "", at, "a real tokenizer is far below this limit; the file is damaged or hostile"});
  }

  void check_string(const std::string& s, const char* what, size_t depth) const {
    if (s.size() > kMaxJsonStringBytes)
      too_large(std::string("a ") + what + " of " + std::to_string(s.size()) + " bytes in " + path(depth) + ", more than the " +
                    std::to_string(kMaxJsonStringBytes) + " a tokenizer file may have",
                start());
  }

  // Counts one value in its container.
  void count() {
    if (++values_ > kMaxJsonValues)
      too_large("more than " + std::to_string(kMaxJsonValues) + " JSON values, the most a tokenizer file may have", start());
    if (frames_.empty()) return;
    Frame& f = frames_.back();
    ++f.count;
    uint64_t cap = 0;
    const char* field = "";
    if (f.field == Field::Vocab) cap = kMaxTokenizerVocab, field = "model.vocab";
    if (f.field == Field::Merges) cap = kMaxTokenizerMerges, field = "model.merges";
    if (f.field == Field::Added) cap = kMaxTokenizerAdded, field = "added_tokens";
    if (cap && f.count > cap)
      too_large(std::string(field) + " has more than " + std::to_string(cap) + " entries, the most a tokenizer.json may have",
                f.object ? key_at_ : start());
  }

  bool value() {
    count();
    mark_ = read_;
    return true;
  }

  bool open(bool object) {
    count();
    if (frames_.size() >= kMaxJsonDepth)
      too_large("arrays and objects nested deeper than " + std::to_string(kMaxJsonDepth) + " levels at " + path(frames_.size()),
                start());
    Field field = frames_.empty() ? (object ? Field::Root : Field::Other)
                  : frames_.back().object ? frames_.back().child
                                          : Field::Other;
    frames_.push_back({field, object});
    mark_ = read_;
    return true;
  }

  bool close() {
    frames_.pop_back();
    mark_ = read_;
    return true;
  }
};

}  // namespace

void prescan_tokenizer_json(std::string_view text, const std::string& name) {
  size_t read = 0;
  Counter counter(text, name, read);
  TrackedIter first{text.data(), &read, text.data()};
  TrackedIter last{text.data() + text.size(), &read, text.data()};
  nlohmann::json::sax_parse(first, last, &counter);
}

}  // namespace nunchaku
