// Help format and parse errors (help.hpp).
#include "cli/help.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <regex>
#include <sstream>

#include <fmt/format.h>

namespace nunchaku::cli {
namespace {

// A placeholder that says what to write: SIZE for sizes, FILE for files, N for counts.
std::string placeholder(const CLI::Option* opt) {
  static const std::vector<std::pair<std::string, std::string>> by_name = {
      {"vram", "SIZE[,SIZE]"}, {"cpu-ram", "SIZE"},        {"staging-size", "SIZE"}, {"shard-size", "SIZE"},
      {"buffer", "SIZE"},      {"overhead", "NAME=SIZE"}, {"output", "FILE"},       {"input", "FILE"},
      {"plan", "FILE"},        {"prompt", "PROMPT"},      {"system", "MESSAGE"}};
  for (const auto& [n, p] : by_name)
    for (const auto& l : opt->get_lnames())
      if (l == n) return p;
  const std::string t = opt->get_type_name();
  if (t.find("INT") != std::string::npos) return "N";
  if (t.find("FLOAT") != std::string::npos) return "X";
  return "VALUE";
}

class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(34); }
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->nonpositional()) return "";
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    if (opt->get_type_size() == 0 || opt->get_type_name().empty()) return "";  // a flag
    std::string out = " " + placeholder(opt);
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " (repeatable)";
    return out;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string d = opt->get_description();
    if (!opt->get_default_str().empty() && opt->get_type_size() != 0) d += " [default: " + opt->get_default_str() + "]";
    // CLI11 indents the lines after the first to the description column itself.
    return wrap(d, output_width() > column_width_ + 22 ? output_width() - column_width_ - 2 : 20);
  }
  std::string make_description(const CLI::App* app) const override {
    const std::string d = app->get_description();
    return d.empty() ? "" : reflow(d, output_width()) + "\n";
  }
  std::string make_footer(const CLI::App* app) const override {
    const std::string f = app->get_footer();
    return f.empty() ? "" : reflow(f, output_width()) + "\n";
  }
  // "  name      description", the description wrapped under its own column.
  std::string make_subcommand(const CLI::App* sub) const override {
    const std::string name = "  " + sub->get_display_name(true);
    const std::string lead = name.size() < column_width_ ? name + std::string(column_width_ - name.size(), ' ')
                                                          : name + "\n" + std::string(column_width_, ' ');
    return lead + wrap(sub->get_description(), output_width(), column_width_) + "\n";
  }
  // Sections in a fixed order (CLI11 lists them in the order options were added).
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    return make_description(app) + make_usage(app, name) + make_positionals(app) + sections(app, mode) +
           make_subcommands(app, mode) + "\n" + make_footer(app);
  }
  std::string sections(const CLI::App* app, CLI::AppFormatMode mode) const {
    static const std::vector<std::string> order = {kInput,    kHardware, kPlacement,    kWorkload, kSampling, kInference,
                                                   kTraining, kQuantization, kPlanning, kLoading,  kConversion, kOutput};
    std::vector<std::string> groups = app->get_groups();
    auto rank = [&](const std::string& g) { return std::find(order.begin(), order.end(), g) - order.begin(); };
    std::stable_sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
    std::string out;
    for (const auto& g : groups) {
      auto opts = app->get_options([&](const CLI::Option* o) {
        return o->get_group() == g && o->nonpositional() &&
               (mode != CLI::AppFormatMode::Sub || (o != app->get_help_ptr() && o != app->get_help_all_ptr()));
      });
      if (!g.empty() && !opts.empty()) out += make_group(g, false, opts);
    }
    return out;
  }
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    return positional ? opt->get_name(true, false) : CLI::Formatter::make_option_name(opt, positional);
  }
};

// Optimal string alignment distance (Levenshtein plus a swap of neighbours).
size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) out.push_back("--" + l);
    for (const auto& s : o->get_snames()) out.push_back("-" + s);
  }
  return out;
}

// The subcommand the user chose (the app itself when none).
const CLI::App& chosen(const CLI::App& app) {
  for (const CLI::App* s : app.get_subcommands())
    if (s->parsed()) return *s;
  return app;
}

std::string help_hint(const CLI::App& cmd) {
  return cmd.get_parent() ? fmt::format("`nunchaku help {}` lists its options", cmd.get_name()) : "`nunchaku --help` lists the commands";
}

std::string did_you_mean(const std::string& near, const std::string& rest) {
  return near.empty() ? rest : fmt::format("did you mean {}? {}", near, rest);
}

// Words CLI11 left over: an unknown option, an unknown subcommand or a stray argument.
Error extras_error(const CLI::App& app) {
  const CLI::App& cmd = chosen(app);
  std::vector<std::string> left = cmd.remaining();
  if (left.empty()) left = app.remaining();
  const auto dash = std::find_if(left.begin(), left.end(), [](const std::string& w) { return w.size() > 1 && w[0] == '-'; });
  const std::string prefix = cmd.get_parent() ? cmd.get_name() + ": " : "";
  if (dash != left.end()) {
    std::string word = dash->substr(0, dash->find('='));
    const std::string near = closest(word, option_names(cmd));
    return Error("usage.unknown_option", fmt::format("{}unknown option {}", prefix, word), {.hint = did_you_mean(near, help_hint(cmd))});
  }
  const std::string word = left.empty() ? "" : left.front();
  if (!cmd.get_parent()) return unknown_command(app, word);
  return Error("usage.extra_argument", fmt::format("{}unexpected argument '{}'", prefix, word), {.hint = help_hint(cmd)});
}

}  // namespace

std::vector<std::string> command_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) out.push_back(s->get_name());
  return out;
}

Error unknown_command(const CLI::App& app, const std::string& word) {
  const std::string near = closest(word, command_names(app));
  return Error("usage.unknown_command", fmt::format("unknown command '{}'", word),
               {.hint = did_you_mean(near, "`nunchaku --help` lists the commands")});
}

std::string wrap(const std::string& text, size_t width, size_t indent) {
  const size_t room = width > indent + 20 ? width - indent : 20;
  std::string out, line;
  size_t start = 0;
  while (start <= text.size()) {
    size_t sp = text.find(' ', start);
    if (sp == std::string::npos) sp = text.size();
    const std::string word = text.substr(start, sp - start);
    if (!line.empty() && line.size() + 1 + word.size() > room) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = sp + 1;
  }
  return out + line;
}

size_t output_width(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  const char* c = std::getenv("COLUMNS");
  char* end = nullptr;
  const long v = c ? std::strtol(c, &end, 10) : 0;
  if (c && end != c && *end == '\0' && v >= 40) return static_cast<size_t>(v);
  return ::isatty(fd) ? 80 : kNoWrap;
}

namespace {
// "Exit codes: ...", "Examples:": a capitalised label of words, then a colon.
bool starts_with_label(const std::string& line) {
  if (line.empty() || !std::isupper(static_cast<unsigned char>(line[0]))) return false;
  const size_t colon = line.find(':');
  if (colon == std::string::npos || colon > 24 || (colon + 1 < line.size() && line[colon + 1] != ' ')) return false;
  return std::all_of(line.begin(), line.begin() + colon, [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == ' '; });
}
}  // namespace

std::string reflow(const std::string& text, size_t width) {
  std::istringstream in(text);
  std::string out, para;
  auto flush = [&] {
    if (!para.empty()) out += wrap(para, width) + "\n";
    para.clear();
  };
  for (std::string line; std::getline(in, line);) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string::npos) {
      flush();
      out += "\n";
    } else if (indent > 0) {
      flush();
      out += std::string(indent, ' ') + wrap(line.substr(indent), width, indent + 4) + "\n";
    } else {
      if (starts_with_label(line)) flush();
      para += (para.empty() ? "" : " ") + line;
    }
  }
  flush();
  if (!out.empty() && (text.empty() || text.back() != '\n')) out.pop_back();
  return out;
}

void use_help_format(CLI::App& app) { app.formatter(std::make_shared<HelpFormatter>()); }

int& verbosity() {
  static int v = 0;
  return v;
}

void finish_help(CLI::App* cmd) {
  cmd->add_flag("-v,--verbose", verbosity(),
                "Diagnostics on stderr: files opened, plan decisions, phase timings, threads (-vv: more; or "
                "NUNCHAKU_LOG=debug|info|warn|error)")
      ->group(kOutput);
  cmd->set_help_flag();
  cmd->set_help_flag("-h,--help", "Print this help and exit")->group(kOutput);
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    const size_t d = distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough: a third of the word (at least one edit) away.
  std::string_view bare = word;
  while (!bare.empty() && bare.front() == '-') bare.remove_prefix(1);
  return best_d <= std::max<size_t>(1, bare.size() / 3) ? best : "";
}

Error usage_error(const CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) return extras_error(app);
  const CLI::App& cmd = chosen(app);
  const std::string prefix = cmd.get_parent() ? cmd.get_name() + ": " : "";
  std::string msg = e.what();
  // "--vram: 1 required TEXT missing" names a type; say what is missing instead.
  static const std::regex missing(R"(^(\S+): \d+ required \S+ missing$)");
  std::smatch m;
  if (std::regex_match(msg, m, missing)) msg = m[1].str() + " needs a value";
  static const std::regex convert(R"(^Could not convert: (\S+) = (.*)$)");
  if (std::regex_match(msg, m, convert)) msg = fmt::format("{}: cannot read '{}' as a number", m[1].str(), m[2].str());
  return Error("usage.parse", prefix + msg, {.hint = help_hint(cmd)});
}

}  // namespace nunchaku::cli
