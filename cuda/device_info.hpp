// CUDA devices as seen at run time, behind a plain C++ header (no CUDA includes).
// Built from device_info.cu when the CUDA component is compiled in, otherwise
// from device_info_stub.cpp, which reports no devices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nunchaku::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};

// True when this binary was built with the CUDA component.
bool compiled_in();
// Devices found now; empty when none or no driver. `why_none` gets the reason.
std::vector<DeviceInfo> list_devices(std::string* why_none = nullptr);

}  // namespace nunchaku::cuda
