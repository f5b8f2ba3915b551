// Where the engine's weights come from: a WeightProvider hands out one module's tensors
// (embedding, a layer, final norm, head) at a time, so a module can live in memory the
// whole run (resident) or be brought in just before it is used and dropped after
// (streamed, stream_provider.hpp). The Transformer calls, per forward pass and module:
//   prefetch(next modules) ... acquire(m) -> views ... ops ... release(m)
//
// Contract:
// - Modules are the layout's (ModelLayout::modules, same indices); the views of module m
//   are parallel to layout.modules[m].tensors (and to its roles).
// - info(m) is valid for the provider's life: names, dtypes, shapes, and the device the
//   bytes will be in when acquired; its `data` may be null (a streamed module).
// - acquire(m) blocks until the bytes are in memory the backend reads (device-tagged views)
//   and returns views valid until release(m). A module is acquired at most once at a time.
// - prefetch(m) is a hint: start bringing m in; it never blocks on I/O.
// - Errors while bringing a module in (a truncated file, say) are thrown by acquire().
// - Pieces (a streamed MoE layer's routed experts): acquire(m) leaves the views of the
//   tensors with expert roles null when pieces_streamed(m); fetch(m, pieces) brings in just
//   the byte ranges asked for (the experts the batch routes to) and returns where they are,
//   valid until the next fetch() or release(m). At most piece_slots() pieces per call.
// Thread-safety: called from one thread (the engine's); implementations may use their own.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/weight_store.hpp"
#include "model/model.hpp"

namespace nunchaku::engine {

// A byte range of one of a module's tensors: `tensor` indexes the module's tensors,
// [begin, begin + bytes) is within that tensor's data.
struct Piece {
  size_t tensor = 0;
  uint64_t begin = 0, bytes = 0;
};

class WeightProvider {
 public:
  virtual ~WeightProvider() = default;
  virtual size_t modules() const = 0;
  virtual std::span<const TensorView> info(size_t m) const = 0;
  virtual std::span<const TensorView> acquire(size_t m) = 0;
  virtual void release(size_t m) = 0;
  virtual void prefetch(size_t m) = 0;
  virtual bool streamed(size_t m) const = 0;
  virtual uint64_t pool_bytes() const { return 0; }  // memory for streamed modules
  virtual int pool_slots() const { return 0; }
  virtual uint64_t slot_bytes() const { return 0; }
  virtual std::string describe() const = 0;          // e.g. "resident", "streamed 12 of 24 modules, 3 slots"
  virtual bool pieces_streamed(size_t) const { return false; }
  virtual int piece_slots() const { return 0; }
  virtual uint64_t piece_bytes() const { return 0; }  // bytes of each piece slot
  virtual void fetch(size_t m, std::span<const Piece> pieces, std::span<const uint8_t*> where);
};

// Every module as the loader left it in a WeightStore (host memory, GPU memory, or a file
// mapping): acquire returns the store's views, release and prefetch do nothing.
class ResidentProvider final : public WeightProvider {
 public:
  // The store must outlive the provider and hold every tensor of the layout's modules.
  ResidentProvider(const ModelLayout& layout, const WeightStore& store);
  size_t modules() const override { return views_.size(); }
  std::span<const TensorView> info(size_t m) const override { return views_[m]; }
  std::span<const TensorView> acquire(size_t m) override { return views_[m]; }
  void release(size_t) override {}
  void prefetch(size_t) override {}
  bool streamed(size_t) const override { return false; }
  std::string describe() const override { return "resident"; }

 private:
  std::vector<std::vector<TensorView>> views_;  // [module][tensor of the module]
};

// Views of each layout module's tensors from a store, in layout order (shared by the
// providers). Throws Error engine.missing_tensor when the store lacks one.
std::vector<std::vector<TensorView>> module_views(const ModelLayout& layout, const WeightStore& store);

}  // namespace nunchaku::engine
