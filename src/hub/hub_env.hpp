// Where the Hub client looks and what it may do, from the environment variables
// huggingface_hub reads (same names, same defaults), read once per command.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace nunchaku::hub {

struct HubEnv {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT, no trailing '/'
  // HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else
  // XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
  std::string hub_cache;
  // nunchaku's own header cache: XDG_CACHE_HOME/nunchaku/hub, else ~/.cache/nunchaku/hub.
  std::string header_cache;
  std::string token;         // HF_TOKEN, else the file HF_TOKEN_PATH, else HF_HOME/token
  std::string token_source;  // "HF_TOKEN" or the token file's path; "" when there is no token
  bool offline = false;      // HF_HUB_OFFLINE (1, ON, YES, TRUE): never touch the network
  // HF_HUB_DOWNLOAD_TIMEOUT (seconds, default 10): the connect timeout, and how long a
  // transfer may go without receiving a byte before it is given up.
  double timeout_s = 10;
  int parallel = 8;          // requests at once (shard headers)
  // Called as each weight file's header arrives (done of total; one call at a time, from
  // any fetching thread): the CLI's progress line. Not from the environment.
  std::function<void(size_t done, size_t total)> on_header;
};

HubEnv hub_env();

}  // namespace nunchaku::hub
