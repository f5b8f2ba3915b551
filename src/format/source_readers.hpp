// The multi-file readers (an index, a split GGUF) with the other files they name taken
// from a SourceOpener instead of the local file system: src/hub opens a Hub repo's
// checkpoint from the headers it fetched by HTTP range, with the same checks as on disk.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/source.hpp"
#include "format/checkpoint.hpp"
#include "format/open.hpp"

namespace nunchaku {

// The Source of `path`, or nullptr when it does not exist there.
using SourceOpener = std::function<std::unique_ptr<Source>(const std::string& path)>;
// The local file system's opener.
std::unique_ptr<Source> open_local_source(const std::string& path);

// sniff_format of a Source (its first 512 bytes).
SniffedFormat sniff_source(const Source& src);

// read_index and read_gguf_parts (format/readers.hpp), every file from `open` (a missing
// one is an error naming it).
Checkpoint read_index(const std::string& index_path, const SourceOpener& open);
Checkpoint read_gguf_parts(const std::string& path, const SourceOpener& open);

}  // namespace nunchaku
