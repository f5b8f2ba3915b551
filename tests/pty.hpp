// Running nunchaku on a pseudo-terminal, as a user at a terminal sees it.
#pragma once

#include <string>
#include <vector>

namespace nunchaku::test {

struct PtyResult {
  int exit_code = -1;
  std::string text;  // what the terminal received (its "\n" arrive as "\r\n")
};

// nunchaku `args` with stderr (and stdout when `both`, else /dev/null) on a new pty whose
// window is `cols` columns wide (0: no size set, as a terminal that reports none).
PtyResult run_on_pty(const std::vector<std::string>& args, bool both, const std::string& stdin_file = "/dev/null",
                     unsigned short cols = 0);

// The widest piece of terminal output between line ends and carriage returns (each "\r"
// starts a redraw from column 0), in columns.
size_t widest_on_terminal(const std::string& text);

// Sets (or with nullptr unsets) an environment variable for the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_;
};

}  // namespace nunchaku::test
