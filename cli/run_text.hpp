// `run --format text`: each request's generated text, in input order, streamed as its tokens
// arrive while it is the earliest request not yet written; a later request's text is held
// until its turn. Each text ends with a newline; a failed request writes nothing here (its
// error goes to stderr). Written through the run's ResultWriter (its failure rules).
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "batch/results.hpp"

namespace nunchaku::cli {

class TextOutput {
 public:
  explicit TextOutput(ResultWriter& out) : out_(out) {}
  // More text of a running request (a prefix of its final text).
  void piece(size_t index, const std::string& text);
  // The request's whole final text (the stop string cut off); `failed`: nothing is written.
  void finish(size_t index, const std::string& text, bool failed = false);
  // Finished texts held behind an unfinished one, in input order (a stop keeps them).
  void write_held();
  // Requests whose text is written in full.
  size_t written() const { return written_; }

 private:
  struct Held {
    std::string text;  // streamed so far, or the final text once done
    size_t shown = 0;  // bytes of `text` already written (the head's only)
    bool done = false, failed = false;
  };
  void write(Held& h);  // the unwritten part of the head's text
  void advance();       // past every finished head

  ResultWriter& out_;
  std::map<size_t, Held> held_;
  size_t head_ = 0, written_ = 0;
};

}  // namespace nunchaku::cli
