// run --format text (run_text.hpp).
#include "cli/run_text.hpp"

#include <algorithm>

namespace nunchaku::cli {

void TextOutput::write(Held& h) {
  if (h.shown >= h.text.size()) return;
  out_.write_line(h.text.substr(h.shown));
  h.shown = h.text.size();
}

void TextOutput::advance() {
  for (auto it = held_.find(head_); it != held_.end(); it = held_.find(head_)) {
    Held& h = it->second;
    if (!h.done) {
      write(h);  // the new head streams from here on
      return;
    }
    if (!h.failed) {
      write(h);
      out_.write_line("\n");
    }
    held_.erase(it);
    ++head_, ++written_;
  }
}

void TextOutput::piece(size_t index, const std::string& text) {
  if (text.empty()) return;
  Held& h = held_[index];
  h.text += text;
  if (index == head_) write(h);
}

void TextOutput::finish(size_t index, const std::string& text, bool failed) {
  Held& h = held_[index];
  // What was streamed is a prefix of the final text (the stop check holds back what a stop
  // string could still begin), so the rest of it follows what was shown.
  h.text = text;
  h.shown = std::min(h.shown, text.size());
  h.done = true;
  h.failed = failed;
  if (index == head_) advance();
}

void TextOutput::write_held() {
  for (auto& [index, h] : held_)
    if (h.done && !h.failed) {
      write(h);
      out_.write_line("\n");
      ++written_;
    }
  held_.clear();
}

}  // namespace nunchaku::cli
