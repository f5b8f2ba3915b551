// Typed, range-checked reads of untrusted config.json / GGUF metadata values, shared by the
// generic spec reader (config.cpp) and the per-family records (src/model/arch/), which read
// their own keys and their transformers class defaults with it.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace nunchaku {

// Limits far above any real model, low enough that a per-layer vector or a product of two
// dims can never be huge or overflow int64.
constexpr int64_t kMaxConfigLayers = 1 << 16;
constexpr int64_t kMaxConfigDim = int64_t{1} << 31;

// Typed lookups over one or two JSON objects (text_config first, then the top level),
// throwing `code` naming `where` and the key on a value of the wrong type or range.
class ConfigFields {
 public:
  ConfigFields(std::string code, std::string where, const nlohmann::json& primary, const nlohmann::json* fallback = nullptr)
      : code_(std::move(code)), where_(std::move(where)), primary_(primary), fallback_(fallback) {}

  // First present, non-null value among `keys`.
  const nlohmann::json* find(std::initializer_list<std::string_view> keys, std::string* found = nullptr) const {
    for (const nlohmann::json* obj : {&primary_, fallback_}) {
      if (!obj || !obj->is_object()) continue;
      for (auto k : keys) {
        auto it = obj->find(std::string(k));
        if (it != obj->end() && !it->is_null()) {
          if (found) *found = std::string(k);
          return &*it;
        }
      }
    }
    return nullptr;
  }

  // Whether any of `keys` is written at all, null included ("sliding_window": null turns a
  // class default off, an absent key keeps it).
  bool has(std::initializer_list<std::string_view> keys) const {
    for (const nlohmann::json* obj : {&primary_, fallback_}) {
      if (!obj || !obj->is_object()) continue;
      for (auto k : keys)
        if (obj->contains(std::string(k))) return true;
    }
    return false;
  }

  std::optional<int64_t> integer(std::initializer_list<std::string_view> keys, int64_t max = kMaxConfigDim) const {
    std::string key;
    const nlohmann::json* v = find(keys, &key);
    if (!v) return std::nullopt;
    return to_int(*v, key, max);
  }

  int64_t to_int(const nlohmann::json& v, const std::string& key, int64_t max = kMaxConfigDim) const {
    double d = 0;
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(max)) bad(key, v, fmt::format("out of range (0..{})", max));
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) {
      int64_t i = v.get<int64_t>();
      if (i < 0 || i > max) bad(key, v, fmt::format("out of range (0..{})", max));
      return i;
    }
    if (v.is_number_float()) d = v.get<double>();
    else bad(key, v, "must be a non-negative integer");
    if (!(d >= 0 && d <= static_cast<double>(max)) || d != std::floor(d))
      bad(key, v, "must be a non-negative integer");
    return static_cast<int64_t>(d);
  }

  std::optional<double> number(std::initializer_list<std::string_view> keys) const {
    std::string key;
    const nlohmann::json* v = find(keys, &key);
    if (!v) return std::nullopt;
    if (!v->is_number() || !std::isfinite(v->get<double>())) bad(key, *v, "must be a finite number");
    return v->get<double>();
  }

  std::optional<bool> boolean(std::initializer_list<std::string_view> keys) const {
    std::string key;
    const nlohmann::json* v = find(keys, &key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad(key, *v, "must be true or false");
    return v->get<bool>();
  }

  std::optional<std::string> string(std::initializer_list<std::string_view> keys) const {
    std::string key;
    const nlohmann::json* v = find(keys, &key);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad(key, *v, "must be a string");
    return v->get<std::string>();
  }

  [[noreturn]] void bad(const std::string& key, const nlohmann::json& v, const std::string& why) const {
    std::string shown = v.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    throw Error(code_, fmt::format("{}: field '{}' {} (found {})", where_, key, why, shown));
  }

 private:
  std::string code_, where_;
  const nlohmann::json& primary_;
  const nlohmann::json* fallback_;
};


}  // namespace nunchaku
