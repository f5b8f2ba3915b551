#include "model/model.hpp"
namespace nunchaku {
nlohmann::json ModelSpec::to_json() const { return nlohmann::json::object(); }
std::string_view module_kind_name(ModuleKind) { return "other"; }
ModelLayout describe_model(const Checkpoint&) { return {}; }
}
