// What the runtimes' attention implementations support, per model type (not only recorded families).
#pragma once

#include <string_view>

namespace nunchaku {

// Model types whose transformers modeling code sets _supports_sdpa = False (transformers 5.24):
// `--attention sdpa` is refused for them.
bool transformers_refuses_sdpa(std::string_view model_type);

}  // namespace nunchaku
