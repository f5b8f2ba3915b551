// accelerate's infer_auto_device_map, re-implemented from its documented behaviour and
// checked against maps accelerate itself produced (testdata/golden/plan_accelerate.json).
#include "memory/plan_accelerate.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "model/arch/record.hpp"

namespace nunchaku {

size_t TorchTree::add(size_t parent, std::string local, bool tensor, uint64_t bytes, bool buffer) {
  TorchNode n;
  n.name = nodes[parent].name.empty() ? local : nodes[parent].name + "." + local;
  n.tensor = tensor;
  n.bytes = bytes;
  nodes.push_back(std::move(n));
  const size_t id = nodes.size() - 1;
  auto& p = nodes[parent];
  (tensor ? (buffer ? p.buffers : p.params) : p.children).push_back(id);
  return id;
}

size_t TorchTree::child(size_t parent, const std::string& local) {
  const std::string full = nodes[parent].name.empty() ? local : nodes[parent].name + "." + local;
  for (size_t c : nodes[parent].children)
    if (nodes[c].name == full) return c;
  return add(parent, local, false);
}

namespace {

uint64_t accel_bytes(const TensorInfo& t, std::optional<DType> dtype) {
  if (!dtype) return t.nbytes;
  const auto& info = dtype_info(t.dtype);
  if (info.kind != DTypeKind::Float) return t.nbytes;  // ints and bools are not converted
  return t.numel() * std::min<uint64_t>(dtype_info(*dtype).block_bytes, info.block_bytes);
}

}  // namespace

bool has_hf_rotary_module(const ModelLayout& layout) {
  if (!layout.spec || layout.spec->source != "config.json" || !layout.spec->wrapper.empty()) return false;
  const ArchRecord* r = find_record(layout.spec->architecture);
  if (!r || !r->hf_rotary_module) return false;
  return std::any_of(layout.modules.begin(), layout.modules.end(), [](const Module& m) { return m.name.starts_with("model.layers."); });
}

TorchTree torch_tree(const Checkpoint& ck, const ModelLayout& layout, std::optional<DType> dtype) {
  TorchTree tree;
  tree.nodes.push_back(TorchNode{});
  std::set<std::string> aliases;  // "a" of "a=b": not counted (torch deduplicates tied parameters)
  for (const auto& p : layout.tied) {
    const auto eq = p.find('=');
    const std::string a = p.substr(0, eq), b = p.substr(eq + 1);
    aliases.insert(a);
    std::vector<std::string> g{a, b};
    std::sort(g.begin(), g.end());
    tree.tied.push_back(g);
  }
  std::set<std::string> layer_names;
  for (const auto& m : layout.modules)
    if (m.kind == ModuleKind::Layer) layer_names.insert(layout.spec ? transformers_name(*layout.spec, m.name) : m.name);

  auto place = [&](const std::string& name, uint64_t bytes) {
    size_t node = 0;
    size_t start = 0;
    for (;;) {
      const size_t dot = name.find('.', start);
      if (dot == std::string::npos) break;
      node = tree.child(node, name.substr(start, dot - start));
      if (layer_names.count(tree.nodes[node].name)) tree.nodes[node].no_split = true;
      start = dot + 1;
    }
    tree.add(node, name.substr(start), true, bytes);
  };
  // Layout order, tensors of a module by name with "weight" before "bias" as nn.Linear defines them.
  for (const auto& m : layout.modules) {
    std::vector<size_t> ts = m.tensors;
    std::sort(ts.begin(), ts.end(), [&](size_t a, size_t b) {
      const auto &na = ck.tensors[a].name, &nb = ck.tensors[b].name;
      auto key = [](const std::string& n) {
        std::string leaf = n.substr(n.rfind('.') + 1);
        return std::make_pair(n.substr(0, n.rfind('.')), leaf == "weight" ? 0 : leaf == "bias" ? 1 : 2);
      };
      auto ka = key(na), kb = key(nb);
      return ka != kb ? ka < kb : na < nb;
    });
    for (size_t ti : ts) {
      const TensorInfo& t = ck.tensors[ti];
      place(layout.spec ? transformers_name(*layout.spec, t.name) : t.name, aliases.count(t.name) ? 0 : accel_bytes(t, dtype));
    }
  }
  for (const auto& a : aliases)
    if (!ck.find(a)) place(layout.spec ? transformers_name(*layout.spec, a) : a, 0);
  if (has_hf_rotary_module(layout) && layout.spec->head_dim > 0) {
    const size_t model = tree.child(0, "model");
    const size_t rot = tree.child(model, "rotary_emb");
    const uint64_t elem = dtype ? std::min<uint64_t>(4, dtype_info(*dtype).block_bytes) : 4;  // inv_freq is fp32
    tree.add(rot, "inv_freq", true, static_cast<uint64_t>(layout.spec->head_dim / 2) * elem, /*buffer=*/true);
  }
  return tree;
}

namespace {

struct Entry {
  std::string name;
  size_t node;
};

struct Accel {
  const TorchTree& t;
  std::unordered_map<std::string, int64_t> sizes;  // compute_module_sizes

  explicit Accel(const TorchTree& tree) : t(tree) {
    for (const auto& n : t.nodes) {
      if (!n.tensor) continue;
      sizes[""] += static_cast<int64_t>(n.bytes);
      for (size_t p = n.name.find('.'); p != std::string::npos; p = n.name.find('.', p + 1))
        sizes[n.name.substr(0, p)] += static_cast<int64_t>(n.bytes);
      sizes[n.name] += static_cast<int64_t>(n.bytes);
    }
  }
  int64_t size(const std::string& name) const {
    auto it = sizes.find(name);
    return it == sizes.end() ? 0 : it->second;
  }
  bool leaf_or_nosplit(size_t node) const { return t.nodes[node].tensor || t.nodes[node].children.empty() || t.nodes[node].no_split; }

  // Params then child modules, as the split step enqueues them.
  std::vector<Entry> split_children(size_t node) const {
    std::vector<Entry> out;
    for (size_t c : t.nodes[node].params) out.push_back({t.nodes[c].name, c});
    for (size_t c : t.nodes[node].children) out.push_back({t.nodes[c].name, c});
    return out;
  }

  // get_max_layer_size: the largest unsplittable layer among `mods` and its names.
  std::pair<int64_t, std::vector<std::string>> max_layer(std::deque<Entry> todo) const {
    int64_t best = 0;
    std::vector<std::string> names;
    while (!todo.empty()) {
      Entry e = todo.front();
      todo.pop_front();
      if (leaf_or_nosplit(e.node)) {
        const int64_t s = size(e.name);
        if (s > best) best = s, names = {e.name};
        else if (s == best) names.push_back(e.name);
      } else {
        const auto& ch = t.nodes[e.node].children;
        for (size_t i = ch.size(); i-- > 0;) todo.push_front({t.nodes[ch[i]].name, ch[i]});
      }
    }
    return {best, names};
  }
  std::pair<int64_t, std::vector<std::string>> max_layer_modules(const std::deque<Entry>& q) const {
    std::deque<Entry> mods;
    for (const auto& e : q)
      if (!t.nodes[e.node].tensor) mods.push_back(e);
    return max_layer(mods);
  }
};

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

AccelerateMap infer_auto_device_map(const TorchTree& tree, const std::vector<std::pair<Device, uint64_t>>& max_memory) {
  Accel a(tree);
  std::vector<Device> devices;
  std::vector<int64_t> cap;
  for (const auto& [d, b] : max_memory) devices.push_back(d), cap.push_back(static_cast<int64_t>(std::min<uint64_t>(b, INT64_MAX)));
  devices.push_back(Device{Device::Kind::Disk, 0});
  cap.push_back(-1);  // unlimited
  std::optional<Device> first_gpu;
  for (const auto& d : devices)
    if (d.kind == Device::Kind::Cuda) {
      first_gpu = d;
      break;
    }
  auto is_main = [&](const Device& d) { return d.kind == Device::Kind::Cpu || (first_gpu && d == *first_gpu); };

  std::deque<Entry> q;
  const TorchNode& root = tree.nodes[0];
  for (size_t c : root.params) q.push_back({tree.nodes[c].name, c});
  for (size_t c : root.children) q.push_back({tree.nodes[c].name, c});
  for (size_t c : root.buffers) q.push_back({tree.nodes[c].name, c});

  AccelerateMap map;
  std::vector<int64_t> used(devices.size(), 0);
  size_t cur = 0;
  auto [max_size, max_names] = a.max_layer(q);

  while (!q.empty()) {
    Entry e = q.front();
    q.pop_front();
    std::erase_if(max_names, [&](const std::string& n) { return n == e.name || n.starts_with(e.name + "."); });
    if (max_names.empty()) std::tie(max_size, max_names) = a.max_layer_modules(q);
    const int64_t msize = a.size(e.name);

    // Tied parameters with one end inside this module and the other outside.
    std::vector<std::string> tied_params;
    for (const auto& g : tree.tied) {
      bool any = false, all = true;
      for (const auto& k : g) {
        const bool inside = contains(k + ".", e.name + ".");
        any = any || inside;
        all = all && inside;
      }
      if (!any || all) continue;
      for (const auto& k : g)
        if (!contains(k + ".", e.name + ".")) tied_params.push_back(k);
    }
    const Device dev = devices[cur];
    const bool unlimited = cap[cur] < 0;
    int64_t cur_max = cap[cur], reserved = 0;
    if (is_main(dev)) cur_max -= max_size, reserved = max_size;

    // The module plus the modules holding its tied parameters.
    int64_t with_ties = msize;
    std::vector<Entry> tied_mods;
    for (const auto& tp : tied_params) {
      auto it = std::find_if(q.begin(), q.end(), [&](const Entry& x) { return tp.starts_with(x.name + "."); });
      if (it == q.end()) continue;
      tied_mods.push_back(*it);
      with_ties += a.size(it->name) - a.size(tp);
    }

    if (unlimited || used[cur] + with_ties <= cur_max) {
      used[cur] += with_ties;
      map.push_back({e.name, dev});
      for (const auto& tm : tied_mods) {
        auto it = std::find_if(q.begin(), q.end(), [&](const Entry& x) { return x.name == tm.name; });
        if (it != q.end()) q.erase(it);
        map.push_back({tm.name, dev});
      }
      continue;
    }
    if (!tied_params.empty() && used[cur] + msize <= cur_max) {
      bool split = false;
      for (const auto& tm : tied_mods) {
        if (a.leaf_or_nosplit(tm.node)) continue;
        auto it = std::find_if(q.begin(), q.end(), [&](const Entry& x) { return x.name == tm.name; });
        const size_t idx = static_cast<size_t>(it - q.begin());
        std::deque<Entry> nq;
        nq.push_back(e);
        for (size_t i = 0; i < idx; ++i) nq.push_back(q[i]);
        for (auto& c : a.split_children(tm.node)) nq.push_back(c);
        for (size_t i = idx + 1; i < q.size(); ++i) nq.push_back(q[i]);
        q = std::move(nq);
        std::tie(max_size, max_names) = a.max_layer_modules(q);
        split = true;
        break;
      }
      if (split) continue;
    }
    if (used[cur] + msize >= cur_max && !a.leaf_or_nosplit(e.node)) {
      auto ch = a.split_children(e.node);
      for (size_t i = ch.size(); i-- > 0;) q.push_front(ch[i]);
      std::tie(max_size, max_names) = a.max_layer_modules(q);
      continue;
    }
    used[cur] += reserved;
    ++cur;
    q.push_front(e);
  }

  // clean_device_map: a module whose keys all went to one device becomes one key.
  std::function<void(const std::string&)> clean = [&](const std::string& mod) {
    const std::string prefix = mod.empty() ? "" : mod + ".";
    std::vector<size_t> idx;
    for (size_t i = 0; i < map.size(); ++i)
      if (map[i].first.starts_with(prefix)) idx.push_back(i);
    bool same = idx.size() > 1;
    for (size_t i : idx) same = same && map[i].second == map[idx[0]].second;
    if (same) {
      const Device d = map[idx[0]].second;
      for (size_t k = idx.size(); k-- > 0;) map.erase(map.begin() + static_cast<std::ptrdiff_t>(idx[k]));
      map.push_back({mod, d});
    }
    // Children: keys under the prefix cut to one component more than `mod`.
    const size_t depth = mod.empty() ? 1 : static_cast<size_t>(std::count(mod.begin(), mod.end(), '.')) + 2;
    std::set<std::string> kids;
    for (const auto& [k, _] : map) {
      if (!k.starts_with(prefix) || k.size() <= mod.size()) continue;
      size_t cut = 0, seen = 0;
      while (seen < depth && (cut = k.find('.', seen == 0 ? 0 : cut + 1)) != std::string::npos) ++seen;
      kids.insert(cut == std::string::npos ? k : k.substr(0, cut));
    }
    for (const auto& c : kids) clean(c);
  };
  clean("");
  return map;
}

DevicePlan plan_accelerate(const Checkpoint& ck, const ModelLayout& layout, const Estimate& e, const PlanRequest& r,
                           AccelerateMap* out) {
  std::vector<std::pair<Device, uint64_t>> mm;
  for (size_t k = 0; k < r.vram.size(); ++k) mm.push_back({Device{Device::Kind::Cuda, static_cast<int>(k)}, r.vram[k]});
  mm.push_back({Device{Device::Kind::Cpu, 0}, r.cpu_ram});
  AccelerateMap map = infer_auto_device_map(torch_tree(ck, layout, e.workload.dtype), mm);
  std::vector<Device> where;
  for (const auto& m : e.modules) {
    const std::pair<std::string, Device>* best = nullptr;
    for (const auto& kv : map)
      if ((kv.first.empty() || kv.first == m.name || m.name.starts_with(kv.first + ".")) &&
          (!best || kv.first.size() > best->first.size()))
        best = &kv;
    if (!best)  // split below the module (a non-layer module broken into parameters): its first part decides
      for (const auto& kv : map)
        if (kv.first.starts_with(m.name + ".")) {
          best = &kv;
          break;
        }
    where.push_back(best ? best->second : Device{Device::Kind::Disk, 0});
  }
  DevicePlan p = charge_plan(e, r, where);
  p.strategy = Strategy::Accelerate;
  p.notes.push_back("accelerate's map reserves nothing for KV cache, activations or the CUDA context; the charges show what it needs at run time");
  if (out) *out = std::move(map);
  return p;
}

}  // namespace nunchaku
