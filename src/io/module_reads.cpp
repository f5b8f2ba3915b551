#include "io/module_reads.hpp"

#include <algorithm>
#include <numeric>

#include "io/tensor_reader.hpp"

namespace nunchaku {

ModuleReads plan_module_reads(const Checkpoint& ck, const Module& m, uint64_t gap) {
  ModuleReads r;
  r.tensor_dst.assign(m.tensors.size(), 0);
  std::vector<size_t> order(m.tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &ta = ck.tensors[m.tensors[a]], &tb = ck.tensors[m.tensors[b]];
    return std::pair(ta.file, ta.offset) < std::pair(tb.file, tb.offset);
  });
  std::vector<std::vector<size_t>> members;  // per run: positions in m.tensors
  for (size_t k : order) {
    const TensorInfo& t = ck.tensors[m.tensors[k]];
    ModuleReads::Run* last = r.runs.empty() ? nullptr : &r.runs.back();
    if (last && last->file == t.file && t.offset <= last->data_end + gap) {
      last->data_end = std::max(last->data_end, t.offset + t.nbytes);
      last->tensors.push_back(m.tensors[k]);
      members.back().push_back(k);
      continue;
    }
    r.runs.push_back({.file = t.file, .off = t.offset, .len = 0, .data_end = t.offset + t.nbytes, .dst = 0,
                      .tensors = {m.tensors[k]}});
    members.push_back({k});
  }
  uint64_t cursor = 0;
  for (size_t i = 0; i < r.runs.size(); ++i) {
    auto& run = r.runs[i];
    const uint64_t first = run.off;
    run.off = align_down(first, kIoPage);
    run.len = align_up(run.data_end, kIoPage) - run.off;
    run.dst = cursor;
    for (size_t k : members[i]) r.tensor_dst[k] = run.dst + (ck.tensors[m.tensors[k]].offset - run.off);
    cursor += run.len;
  }
  r.bytes = cursor;
  return r;
}

}  // namespace nunchaku
