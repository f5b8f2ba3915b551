// PATH as a user gives it to any subcommand, turned into what to open:
//   1. a path that exists: itself;
//   2. a Hub reference (hub/repo_ref.hpp): the snapshot of the local HF cache when it holds
//      what the command needs (hub/hf_cache.hpp);
//   3. else, for a command that reads headers only and unless HF_HUB_OFFLINE is set, the
//      Hub's headers (hub/remote.hpp): config.json, the index and each weight file's header
//      by HTTP range, cached by commit under HubEnv::header_cache;
//   4. else exit 2 naming what is missing and the `hf download` line that fetches it.
#pragma once

#include <optional>
#include <string>

#include "format/checkpoint.hpp"
#include "hub/hub_env.hpp"
#include "hub/remote.hpp"
#include "hub/repo_ref.hpp"

namespace nunchaku::hub {

// What a command reads besides the headers.
struct Need {
  bool data = false;       // tensor bytes (load, run, convert, inspect --verify): local files only
  bool tokenizer = false;  // the tokenizer files (run, tokenize)
  bool weights = true;     // false: the tokenizer files alone (tokenize of an HF repo)
};

struct Resolved {
  std::string path;                  // the file or folder to open; "" when `remote` holds the checkpoint
  std::optional<Checkpoint> remote;  // the Hub's headers (need.data false only)
  std::optional<RepoRef> ref;        // set when PATH was a Hub reference
  RemoteStats stats;                 // requests and bytes spent on the network
};

// `file` is the --file option ("" when not given). Throws Error (exit 2): hub.not_cached,
// hub.incomplete, and those of choose_weights and the remote reads.
Resolved resolve_model(const std::string& arg, const std::string& file, Need need, const HubEnv& env);

}  // namespace nunchaku::hub
