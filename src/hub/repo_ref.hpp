// A model named by its Hugging Face Hub id, as a user types or pastes it:
//   org/name[@revision][:QUANT]                       (QUANT: llama.cpp's -hf tag, picks a GGUF)
//   hf://org/name[@revision][/path/in/repo]           (huggingface_hub's HfFileSystem form)
//   https://huggingface.co/org/name[/tree|blob|resolve/REV[/path/in/repo]]  (a page or file URL)
// Only tried when the text is not a path on disk (cli/model_source.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nunchaku::hub {

struct RepoRef {
  std::string id;                  // "org/name"
  std::string revision = "main";   // branch, tag or commit sha
  bool revision_given = false;
  std::string file;                // one file of the repo (a GGUF), "" = the whole model
  std::string quant;               // "Q4_K_M" of org/name:Q4_K_M, "" = none

  std::string display() const;     // "org/name", "org/name@rev", with ":QUANT" or "/file"
  std::string page_url(const std::string& endpoint) const;  // the repo's page on the Hub
};

// nullopt when the text is not a Hub reference. `endpoint` (HF_ENDPOINT) is also accepted
// as a URL prefix besides https://huggingface.co and https://hf.co.
std::optional<RepoRef> parse_repo_ref(std::string_view text, std::string_view endpoint = {});

// huggingface_hub's repo id rule: one or two parts of [A-Za-z0-9._-], at most 96
// characters each, no "--" or "..", not starting or ending with '-' or '.'.
bool valid_repo_id(std::string_view id);

// A path inside a repo, as it may become a file under the caches (refs/REVISION, a listed
// file): '/'-separated, relative, no empty, "." or ".." part, no NUL byte.
bool valid_repo_path(std::string_view path);

// A commit sha (40 hexadecimal digits) rather than a branch or tag name.
bool is_commit_sha(std::string_view rev);

// "models--org--name": the repo's folder in the HF cache (huggingface_hub's naming).
std::string repo_folder_name(const std::string& id);

}  // namespace nunchaku::hub
