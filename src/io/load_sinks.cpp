#include "io/load_sinks.hpp"

#include <chrono>

#include "core/error.hpp"
#include "core/trace.hpp"
#include "io/convert.hpp"

namespace nunchaku::load {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

cuda::ConvType conv_type(DType t) {
  return t == DType::F32 ? cuda::ConvType::F32 : t == DType::F16 ? cuda::ConvType::F16 : cuda::ConvType::BF16;
}

}  // namespace

void cuda_check(const Checkpoint& ck, bool good, const std::string& err, const char* what) {
  if (!good) throw Error("load.cuda", std::string(what) + ": " + err, {.file = ck.path}, Exit::Internal);
}

Landing landing(const Unit& u, const Chunk& c) {
  Landing l{u.dst_off + (c.off - u.off), 0};
  if (u.convert) {
    const uint32_t in_es = convert_elem_bytes(u.from), out_es = convert_elem_bytes(u.to);
    l.dst_off = u.dst_off + (c.off - u.off) / in_es * out_es;
    l.elements = c.len / in_es;
  }
  return l;
}

uint8_t* Sink::place(const Chunk&) const {
  throw Error("load.internal", "a staged chunk has no place to read into", {}, Exit::Internal);
}

void Sink::land(const Chunk&, StagingSlot*) {
  throw Error("load.internal", "a chunk read in place went through the staging ring", {}, Exit::Internal);
}

uint8_t* HostSink::place(const Chunk& c) const {
  const Unit& u = cx_.plan.units[c.unit];
  return cx_.module_base[u.module] + landing(u, c).dst_off;
}

void CpuConvertSink::land(const Chunk& c, StagingSlot* s) {
  const Unit& u = cx_.plan.units[c.unit];
  const Landing l = landing(u, c);
  trace::Span span("convert", "load");
  const auto t0 = Clock::now();
  convert_cpu(u.from, u.to, s->payload, cx_.module_base[u.module] + l.dst_off, l.elements);
  busy_s_ += since(t0);
  cx_.done_bytes += s->length;
  cx_.ring->release(s);
}

CudaSink::CudaSink(const SinkContext& cx, const std::vector<int>& devices, const std::map<int, bool>& converts,
                   uint64_t scratch_bytes, LoadReport& rep)
    : Sink(cx) {
  for (int dev : devices) {
    auto s = std::make_unique<cuda::CopyStream>();
    std::string err;
    uint64_t scratch = converts.count(dev) ? scratch_bytes : 0;
    if (!s->init(dev, cx.ring ? cx.ring->count() : 1, scratch, &err))
      throw Error("load.out_of_memory", "cannot set up the copy stream on cuda:" + std::to_string(dev) + ": " + err,
                  {.file = cx.ck.path}, Exit::OutOfMemory);
    rep.gpu[Device{Device::Kind::Cuda, dev}].predicted += scratch;
    streams_[dev] = std::move(s);
  }
}

void CudaSink::retire_oldest() {
  StagingSlot* s = inflight_.front();
  const Unit& u = cx_.plan.units[cx_.chunks[s->chunk].unit];
  std::string err;
  trace::Span span("copy wait", "load");
  cuda_check(cx_.ck, streams_.at(cx_.plan.module_dev[u.module].index)->wait(s->id, &err), err, "copy to the GPU");
  cx_.done_bytes += s->length;
  inflight_.pop_front();
  cx_.ring->release(s);
}

void CudaSink::land(const Chunk& c, StagingSlot* s) {
  const Unit& u = cx_.plan.units[c.unit];
  const Device dev = cx_.plan.module_dev[u.module];
  const Landing l = landing(u, c);
  trace::Span span("copy", "load");
  const auto t0 = Clock::now();
  auto& st = *streams_.at(dev.index);
  std::string err;
  uint8_t* dst = cx_.module_base[u.module] + l.dst_off;
  bool good = u.convert ? st.h2d_convert(dst, s->payload, l.elements, conv_type(u.from), conv_type(u.to), &err)
                        : st.h2d(dst, s->payload, c.len, &err);
  cuda_check(cx_.ck, good && st.record(s->id, &err), err, "enqueue a copy to the GPU");
  inflight_.push_back(s);
  // One copy in flight per consumer: the next buffer is read while this one moves.
  while (inflight_.size() > 1) retire_oldest();
  busy_s_ += since(t0);
}

void CudaSink::finish() {
  while (!inflight_.empty()) retire_oldest();
}

void CudaSink::synchronize() {
  for (auto& [dev, st] : streams_) {
    std::string err;
    cuda_check(cx_.ck, st->synchronize(&err), err, "finish the copies to the GPU");
  }
}

}  // namespace nunchaku::load
