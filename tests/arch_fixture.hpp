// Header-only checkpoints from testdata/arch/<case>/: config.json and one sparse
// model.safetensors (the data region a file hole) written from tensors.json; "#" in a
// tensor name expands to experts 0..E-1.
#pragma once

#include <filesystem>
#include <string>

namespace nunchaku::test {

void write_arch_fixture(const std::filesystem::path& src, const std::string& dir);

}  // namespace nunchaku::test
