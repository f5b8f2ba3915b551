// Built when the CUDA component is off: no devices, and says why.
#include "cuda/device_info.hpp"

namespace nunchaku::cuda {

bool compiled_in() { return false; }

std::vector<DeviceInfo> list_devices(std::string* why_none) {
  if (why_none) *why_none = "built without CUDA";
  return {};
}

}  // namespace nunchaku::cuda
