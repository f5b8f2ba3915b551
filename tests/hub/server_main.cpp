// nunchaku_hub_server: tests/hub/hub_server.hpp standalone, for scripts/check_hub_server.py.
//   nunchaku_hub_server [--port N] REPO=DIR[:gated|:private] ...
// Prints "http://127.0.0.1:PORT" on a line once it listens and serves until stdin closes.
// Each repo's commit sha is the SHA-1-shaped hex of its id (hub_repo_sha). Tokens:
// hf_granted reads gated and private repos; hf_other is valid without that access.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "tests/hub/hub_server.hpp"

int main(int argc, char** argv) {
  using namespace nunchaku::testhub;
  std::vector<Repo> repos;
  uint16_t port = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--port" && i + 1 < argc) {
      port = uint16_t(std::stoi(argv[++i]));
      continue;
    }
    const size_t eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "usage: %s [--port N] org/name=DIR[:gated|:private] ...\n", argv[0]);
      return 2;
    }
    Repo r;
    r.id = a.substr(0, eq);
    r.dir = a.substr(eq + 1);
    for (const char* flag : {":gated", ":private"}) {
      const size_t at = r.dir.rfind(flag);
      if (at != std::string::npos && at + std::strlen(flag) == r.dir.size()) {
        (std::strcmp(flag, ":gated") == 0 ? r.gated : r.is_private) = true;
        r.dir.resize(at);
      }
    }
    r.sha = hub_repo_sha(r.id);
    repos.push_back(r);
  }
  HubServer server(repos, {"hf_granted"}, {"hf_other"}, port);
  std::printf("%s\n", server.endpoint().c_str());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}
