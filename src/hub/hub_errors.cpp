#include "hub/hub_errors.hpp"

#include "core/error.hpp"

namespace nunchaku::hub {

void check_response(const HttpResponse& resp, const RepoRef& ref, const HubEnv& env, const std::string& path) {
  if (resp.status >= 200 && resp.status < 300) return;
  const std::string code = resp.header("x-error-code");
  const std::string said = resp.header("x-error-message");
  const std::string page = ref.page_url(env.endpoint);
  const std::string what = path.empty() ? ref.id : ref.id + "/" + path;
  const std::string token = env.token.empty() ? std::string("no token is set")
                                              : "the token from " + env.token_source + " was sent";
  ErrorContext ctx{.file = resp.url};
  if (code == "GatedRepo") {
    ctx.hint = env.token.empty()
                   ? "set HF_TOKEN to a token of an account that was granted access (request it on " + page + ")"
                   : "the account of the token from " + env.token_source + " has no access yet: request it on " + page;
    throw Error("hub.gated", ref.id + " is a gated repo (HTTP " + std::to_string(resp.status) + ", " + token + ")", ctx);
  }
  if (code == "RevisionNotFound") {
    ctx.hint = "check the branch, tag or commit after '@' on " + page;
    throw Error("hub.revision_not_found", ref.id + " has no revision '" + ref.revision + "' (HTTP 404)", ctx);
  }
  if (code == "EntryNotFound") {
    ctx.hint = "the repo's files are listed on " + page + "/tree/" + ref.revision;
    throw Error("hub.entry_not_found", ref.id + " has no file " + path + " at " + ref.revision + " (HTTP 404)", ctx);
  }
  if (code == "RepoNotFound" || resp.status == 401 || resp.status == 404) {
    if (said == "Invalid credentials in Authorization header" || (resp.status == 401 && !env.token.empty() && code.empty())) {
      ctx.hint = "the token from " + env.token_source + " was refused; make a new one at " + env.endpoint + "/settings/tokens";
      throw Error("hub.unauthorized", "the Hub refused the token (HTTP 401)", ctx);
    }
    ctx.hint = env.token.empty() ? "check the id; for a private repo set HF_TOKEN to a token that can read it"
                                 : "check the id; " + token + " and it cannot see a repo of that name";
    throw Error("hub.repo_not_found", "no repository " + ref.id + " on " + env.endpoint + " (HTTP " + std::to_string(resp.status) + ")", ctx);
  }
  if (resp.status == 403) {
    ctx.hint = "the account of " + (env.token.empty() ? std::string("the request") : "HF_TOKEN (" + env.token_source + ")") +
               " may not read " + page + (said.empty() ? "" : ": " + said);
    throw Error("hub.forbidden", what + ": access denied (HTTP 403)", ctx);
  }
  ctx.hint = resp.status == 429 ? std::string("rate limited: wait and retry, or set HF_TOKEN (higher limits)")
             : resp.status >= 500 ? std::string("the Hub had a problem; retry later, or set HF_HUB_OFFLINE=1 to use the local cache")
                                  : said;
  throw Error("hub.http", what + ": the Hub answered HTTP " + std::to_string(resp.status) + (said.empty() ? "" : " (" + said + ")"), ctx);
}

}  // namespace nunchaku::hub
