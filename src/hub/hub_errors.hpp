// The Hub's HTTP errors as errors that say what to do (exit 2), read from the status and
// the X-Error-Code / X-Error-Message headers the Hub sends (GatedRepo, RepoNotFound,
// RevisionNotFound, EntryNotFound), as huggingface_hub's hf_raise_for_status reads them.
#pragma once

#include <string>

#include "hub/http.hpp"
#include "hub/repo_ref.hpp"

namespace nunchaku::hub {

// Returns when resp.status is 2xx; else throws Error: hub.gated, hub.unauthorized,
// hub.repo_not_found, hub.revision_not_found, hub.entry_not_found, hub.http.
// `path` is the file asked for ("" for the repo's listing).
void check_response(const HttpResponse& resp, const RepoRef& ref, const HubEnv& env, const std::string& path);

}  // namespace nunchaku::hub
