// What every *_stub.cpp (the CUDA component built without CUDA) answers: false, with
// "built without CUDA" in `err`.
#pragma once

#include <string>

namespace nunchaku::cuda {

inline bool no_cuda(std::string* err) {
  if (err) *err = "built without CUDA";
  return false;
}

}  // namespace nunchaku::cuda
