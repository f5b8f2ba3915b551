// Kernel execution on the CPU: a grid's blocks run one after another. A block's threads run
// either as fibers on the calling thread (default: a switch costs well under a microsecond,
// so the [cuda] suite fits the normal test run) or as OS threads of a pool that only grows to
// the largest block launched (NUNCHAKU_CUDA_EMU_THREADS=os, and the default in TSan builds,
// where real threads let ThreadSanitizer see races between a block's threads). The
// primitives behave the same in both: block-wide and warp-wide barriers that threads leave
// when they return (so exited threads do not hold the others back) and that break, faulting
// the launch, when they cannot complete (fibers: a scheduling pass in which no thread moves;
// OS threads: a wait longer than 20 s): a barrier some threads never reach.
//
// Shuffles go through two alternating slot arrays per warp with one warp barrier each: a lane
// writes its value to slot[p][lane], waits, reads slot[p][src]; slot[p] is written again two
// shuffles later, after a barrier every lane reaches only once it has read. Each slot carries
// its writer's shuffle count, so a lane that skipped a shuffle (divergence) is a fault, not a
// stale value.
//
// A launch whose first block never synchronized (elementwise kernels) runs its other blocks'
// threads one after another on the calling thread; a barrier or shuffle met there is a fault.
//
// Missing barriers: fibers are resumed in a new order in every scheduling pass
// (NUNCHAKU_CUDA_EMU_ORDER=shuffle, the default, seeded by NUNCHAKU_CUDA_EMU_SEED, the block
// and the pass, so a run is reproducible; or forward / reverse), so a thread that reads what
// another writes without a barrier in between sees it unwritten in some blocks; and shared
// memory (the nk_emu_shared section, see cuda_emu.hpp) is filled with 0xff (NaN) before each
// block, so what a block reads before writing is NaN, not the last block's values.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <memory>
#include <mutex>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/emu/exec.hpp"

// The bounds of the nk_emu_shared section (cuda_emu.hpp's `__shared__`), which the linker
// provides; weak, so a program without shared variables links with an empty range.
extern "C" char __start_nk_emu_shared[] __attribute__((weak));
extern "C" char __stop_nk_emu_shared[] __attribute__((weak));
#if defined(__SANITIZE_ADDRESS__)
extern "C" int __asan_address_is_poisoned(const volatile void* addr);
#endif

thread_local constinit uint3 threadIdx, blockIdx;
thread_local constinit dim3 blockDim, gridDim;

namespace nk_emu {
namespace {

std::atomic<int> g_stuck_ms{20000};

// Fibers switch with a few instructions (x86-64 only; elsewhere OS threads are the mode):
// nk_emu_switch(&save_sp, sp) pushes the callee-saved registers and the SSE/x87 control words,
// stores the stack pointer in save_sp, and pops the same from `sp`. A new fiber's stack is laid
// out as if it had switched away at the start of nk_emu_fiber_start, which calls r13(r12).
#if defined(__x86_64__)
#define NK_EMU_FIBERS 1
extern "C" void nk_emu_switch(void** save_sp, void* sp);
extern "C" void nk_emu_fiber_start();
asm(R"(
  .text
  .globl nk_emu_switch
  .type nk_emu_switch, @function
nk_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size nk_emu_switch, .-nk_emu_switch
  .globl nk_emu_fiber_start
  .type nk_emu_fiber_start, @function
nk_emu_fiber_start:
  movq %r12, %rdi
  andq $-16, %rsp
  call *%r13
  ud2
  .size nk_emu_fiber_start, .-nk_emu_fiber_start
)");
#else
#define NK_EMU_FIBERS 0
#endif

// AddressSanitizer follows the stack switches through its fiber annotations: the side that
// switches away saves its fake stack (detect_stack_use_after_return) in `save` and restores it
// when resumed; a fiber that ends for good passes nullptr, which frees its fake stack.
#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
extern "C" void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
#define NK_ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define NK_ASAN_FINISH(saved, bottom_old, size_old) __sanitizer_finish_switch_fiber(saved, bottom_old, size_old)
#else
#define NK_ASAN_START(save, bottom, size) ((void)(save))
#define NK_ASAN_FINISH(saved, bottom_old, size_old) ((void)(saved))
#endif

// The order fibers are resumed in within a scheduling pass.
enum class Order { Forward, Reverse, Shuffle };
Order fiber_order() {
  static const Order o = [] {
    const char* v = std::getenv("NUNCHAKU_CUDA_EMU_ORDER");
    const std::string s = v ? v : "";
    if (s.empty() || s == "shuffle") return Order::Shuffle;
    if (s == "forward") return Order::Forward;
    if (s == "reverse") return Order::Reverse;
    std::fprintf(stderr, "cuda emulator: NUNCHAKU_CUDA_EMU_ORDER=%s is not shuffle, forward or reverse; using shuffle\n", v);
    return Order::Shuffle;
  }();
  return o;
}
// `order` (0..n-1) for scheduling pass `pass` of the block at `b`.
void arrange(std::vector<int>& order, uint3 b, uint64_t pass) {
  const int n = int(order.size());
  for (int i = 0; i < n; ++i) order[size_t(i)] = i;
  switch (fiber_order()) {
    case Order::Forward: return;
    case Order::Reverse: std::reverse(order.begin(), order.end()); return;
    case Order::Shuffle: {
      uint64_t x = emu_seed() ^ (uint64_t(b.x) << 32 | b.y << 16 | b.z) * 0x9e3779b97f4a7c15ull ^ pass * 0xd1b54a32d192ed03ull;
      for (int i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(splitmix64(x) % uint64_t(i + 1))]);
      return;
    }
  }
}

// Shared memory: every `__shared__` variable lies in the nk_emu_shared section (the bounds
// declared at the top of this file).
void poison_shared() {
  // The runs of bytes to fill: the whole section, or under ASan the parts outside the
  // redzones it may have put between the variables (found once: they do not move).
  static const std::vector<std::pair<char*, size_t>> runs = [] {
    std::vector<std::pair<char*, size_t>> r;
    char* b = __start_nk_emu_shared;
    char* e = __stop_nk_emu_shared;
    if (!b || !e || e <= b) return r;
#if defined(__SANITIZE_ADDRESS__)
    for (char* p = b; p < e;) {
      while (p < e && __asan_address_is_poisoned(p)) ++p;
      char* q = p;
      while (q < e && !__asan_address_is_poisoned(q)) ++q;
      if (q > p) r.emplace_back(p, size_t(q - p));
      p = q;
    }
#else
    r.emplace_back(b, size_t(e - b));
#endif
    return r;
  }();
  for (const auto& [p, n] : runs) std::memset(p, 0xff, n);
}

bool use_fibers() {
  static const bool on = [] {
    if (!NK_EMU_FIBERS) return false;
    const char* v = std::getenv("NUNCHAKU_CUDA_EMU_THREADS");
    if (v && *v) return std::string(v) != "os";
#if defined(__SANITIZE_THREAD__)
    return false;
#else
    return true;
#endif
  }();
  return on;
}

// Fiber mode: the scheduler's saved stack pointer, one stack and saved pointer per CUDA thread.
constexpr size_t kFiberStack = 256 << 10;
struct Fibers {
  void* sched_sp = nullptr;
  const void* sched_bottom = nullptr;  // the scheduler's stack, for ASan's annotations
  size_t sched_size = 0;
  std::vector<void*> sp;
  std::vector<std::unique_ptr<char[]>> stacks;
  std::vector<uint8_t> done;
  std::vector<const char*> waiting;  // the barrier a fiber yielded at
  int current = -1;
  uint64_t progress = 0;  // arrivals, releases, exits: what a scheduling pass must change
};
Fibers& fibers() {
  static Fibers* f = new Fibers;
  return *f;
}
void fiber_yield(const char* what) {
#if NK_EMU_FIBERS
  Fibers& f = fibers();
  const int i = f.current;
  f.waiting[size_t(i)] = what;
  void* fake = nullptr;
  NK_ASAN_START(&fake, f.sched_bottom, f.sched_size);
  nk_emu_switch(&f.sp[size_t(i)], f.sched_sp);
  NK_ASAN_FINISH(fake, nullptr, nullptr);
  f.waiting[size_t(i)] = nullptr;
#else
  (void)what;
#endif
}
struct Fault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Barrier {
 public:
  void reset(int n) {
    expected_ = n;
    arrived_ = 0;
    broken_ = false;
  }
  void wait(const char* what) {
    std::unique_lock lk(m_);
    if (broken_) throw Fault("the block faulted");
    const uint64_t phase = phase_;
    if (use_fibers()) ++fibers().progress;
    if (++arrived_ == expected_) {
      arrived_ = 0;
      ++phase_;
      cv_.notify_all();
      return;
    }
    if (use_fibers()) {
      while (phase_ == phase && !broken_) {
        lk.unlock();
        fiber_yield(what);
        lk.lock();
      }
    } else if (!cv_.wait_for(lk, std::chrono::milliseconds(g_stuck_ms.load()), [&] { return phase_ != phase || broken_; })) {
      broken_ = true;
      cv_.notify_all();
      throw Fault(std::string(what) + " not reached by every thread within " + std::to_string(g_stuck_ms.load()) + " ms (" + std::to_string(arrived_) + " of " +
                  std::to_string(expected_) + " arrived): a barrier in divergent code?");
    }
    if (phase_ == phase) throw Fault("the block faulted");
  }
  void drop() {
    std::lock_guard lk(m_);
    if (use_fibers()) ++fibers().progress;
    --expected_;
    if (expected_ > 0 && arrived_ == expected_) {
      arrived_ = 0;
      ++phase_;
      cv_.notify_all();
    }
  }
  void break_all() {
    std::lock_guard lk(m_);
    broken_ = true;
    cv_.notify_all();
  }
  int expected() {
    std::lock_guard lk(m_);
    return expected_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int expected_ = 0, arrived_ = 0;
  uint64_t phase_ = 0;
  bool broken_ = false;
};

struct Warp {
  Barrier bar;
  int lanes = 0;                    // threads in this warp (the last warp of a block may be short)
  std::atomic<uint32_t> exited{0};  // lanes that have returned
  uint64_t slot[2][32] = {};
  uint64_t seq[2][32] = {};  // the writer's shuffle count
};

// The block being run and the pool that runs it.
struct Pool {
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<std::binary_semaphore>> go;
  std::counting_semaphore<> finished{0};
  // The current block.
  const std::function<void()>* body = nullptr;
  uint3 block_idx;
  dim3 bdim, gdim;
  int nthreads = 0;
  Barrier block_bar;
  std::vector<std::unique_ptr<Warp>> warps;
  std::mutex fault_m;
  std::string fault;  // first fault of the block
  std::atomic<int> remaining{0};
  std::atomic<bool> synced{false};  // a thread of this launch called a barrier or shuffle
  std::vector<uint64_t> shfl_count;  // per thread of the block: shuffles it took
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: its threads may still wait at exit
  return *p;
}

thread_local int t_index = -1;  // linear thread index in the block, -1 off the pool, kSerial below
constexpr int kSerial = -2;     // a thread of a block run one thread after another

void note_fault(Pool& p, const std::string& what) {
  {
    std::lock_guard lk(p.fault_m);
    if (p.fault.empty())
      p.fault = what + " (block " + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
                std::to_string(blockIdx.z) + ", thread " + std::to_string(threadIdx.x) + "," +
                std::to_string(threadIdx.y) + "," + std::to_string(threadIdx.z) + ")";
  }
  p.block_bar.break_all();
  for (auto& w : p.warps) w->bar.break_all();
}

void set_builtins(Pool& p, int i);

// The kernel body on this CUDA thread; a fault or exception is recorded for the launch.
void run_body(Pool& p) {
  try {
    (*p.body)();
  } catch (const Fault& f) {
    note_fault(p, f.what());
  } catch (const std::exception& e) {
    note_fault(p, std::string("exception in the kernel: ") + e.what());
  }
}

// CUDA thread i of the current block, on whatever runs it (a pool thread or a fiber).
void run_thread(Pool& p, int i) {
  t_index = i;
  p.shfl_count[size_t(i)] = 0;
  set_builtins(p, i);
  run_body(p);
  Warp& w = *p.warps[size_t(i / 32)];
  w.exited.fetch_or(1u << (i % 32));
  w.bar.drop();
  p.block_bar.drop();
  t_index = -1;
}

void worker(int i) {
  Pool& p = pool();
  for (;;) {
    p.go[size_t(i)]->acquire();
    run_thread(p, i);
    if (p.remaining.fetch_sub(1) == 1) p.finished.release();
  }
}

extern "C" void nk_emu_fiber_main(long i) {
  NK_ASAN_FINISH(nullptr, &fibers().sched_bottom, &fibers().sched_size);
  run_thread(pool(), int(i));
  Fibers& f = fibers();
  f.done[size_t(i)] = 1;
  ++f.progress;
#if NK_EMU_FIBERS
  void* dead = nullptr;
  NK_ASAN_START(nullptr, f.sched_bottom, f.sched_size);
  nk_emu_switch(&dead, f.sched_sp);  // never resumed
#endif
}

// A fresh fiber for thread i: its stack as nk_emu_switch leaves one, returning into
// nk_emu_fiber_start with r12 = i and r13 = nk_emu_fiber_main.
void init_fiber(Fibers& f, int i) {
#if defined(__SANITIZE_ADDRESS__)
  // The frames of the fiber that ran here before never returned: their redzones are still
  // poisoned in ASan's shadow memory.
  __asan_unpoison_memory_region(f.stacks[size_t(i)].get(), kFiberStack);
#endif
  auto* top = reinterpret_cast<uint64_t*>(
      (reinterpret_cast<uintptr_t>(f.stacks[size_t(i)].get()) + kFiberStack) & ~uintptr_t(15));
  uint64_t* sp = top - 8;
  sp[0] = 0x1f80 | (uint64_t(0x037f) << 32);  // MXCSR default, x87 control word default
  sp[1] = sp[2] = 0;                            // r15, r14
  sp[3] = reinterpret_cast<uint64_t>(&nk_emu_fiber_main);  // r13
  sp[4] = uint64_t(i);                                     // r12
  sp[5] = sp[6] = 0;                                       // rbx, rbp
#if NK_EMU_FIBERS
  sp[7] = reinterpret_cast<uint64_t>(&nk_emu_fiber_start);  // return address
#endif
  f.sp[size_t(i)] = sp;
}

void grow(Pool& p, int n) {
  if (int(p.shfl_count.size()) < n) p.shfl_count.resize(size_t(n));
  if (use_fibers()) {
    Fibers& f = fibers();
    while (int(f.stacks.size()) < n) f.stacks.push_back(std::make_unique<char[]>(kFiberStack));
    f.sp.resize(std::max(f.sp.size(), size_t(n)));
    return;
  }
  while (int(p.threads.size()) < n) {
    const int i = int(p.threads.size());
    p.go.push_back(std::make_unique<std::binary_semaphore>(0));
    p.threads.emplace_back(worker, i);
  }
}

// Every barrier and shuffle passes here: marks the launch as synchronizing, and refuses in a
// block run serially (its first block did not synchronize, this one does).
void entering_sync(const char* what) {
  if (t_index == kSerial)
    throw Fault(std::string(what) + " in a block the emulator ran one thread after another, because the launch's "
                "first block never synchronized (a kernel that synchronizes only in some blocks: not modelled)");
  if (t_index < 0) throw std::logic_error(std::string(what) + " outside a kernel");
  pool().synced = true;
}

Warp& my_warp() {
  return *pool().warps[size_t(t_index / 32)];
}

}  // namespace

namespace {
void set_builtins(Pool& p, int i) {
  const unsigned bx = p.bdim.x, by = p.bdim.y;
  threadIdx = {unsigned(i) % bx, (unsigned(i) / bx) % by, unsigned(i) / (bx * by)};
  blockIdx = p.block_idx;
  blockDim = p.bdim;
  gridDim = p.gdim;
}

void reset_block(Pool& p, int n) {
  p.block_bar.reset(n);
  for (int w = 0; w < (n + 31) / 32; ++w) {
    Warp& wp = *p.warps[size_t(w)];
    wp.lanes = std::min(32, n - 32 * w);
    wp.bar.reset(wp.lanes);
    wp.exited = 0;
    std::memset(wp.seq, 0, sizeof wp.seq);
  }
}

// One block on the pool: an OS thread per CUDA thread.
void run_threaded(Pool& p, int n) {
  reset_block(p, n);
  p.remaining = n;
  for (int i = 0; i < n; ++i) p.go[size_t(i)]->release();
  p.finished.acquire();
}

// One block as fibers on the calling thread, resumed round robin; a pass in which none of
// them arrives at, passes or leaves a barrier is a deadlock: the block faults, which breaks
// its barriers, and the fibers unwind.
void run_fibers(Pool& p, int n) {
  Fibers& f = fibers();
  reset_block(p, n);
  f.done.assign(size_t(n), 0);
  f.waiting.assign(size_t(n), nullptr);
  for (int i = 0; i < n; ++i) init_fiber(f, i);
  std::vector<int> order(static_cast<size_t>(n));
  uint64_t pass = 0;
  for (int live = n; live > 0;) {
    const uint64_t before = f.progress;
    arrange(order, p.block_idx, pass++);
    for (const int i : order) {
      if (f.done[size_t(i)]) continue;
      f.current = i;
      t_index = i;
      set_builtins(p, i);
#if NK_EMU_FIBERS
      void* fake = nullptr;
      NK_ASAN_START(&fake, f.stacks[size_t(i)].get(), kFiberStack);
      nk_emu_switch(&f.sched_sp, f.sp[size_t(i)]);
      NK_ASAN_FINISH(fake, nullptr, nullptr);
#endif
      if (f.done[size_t(i)]) --live;
    }
    if (live > 0 && f.progress == before) {
      int at = 0;
      while (!f.waiting[size_t(at)]) ++at;
      t_index = at;
      set_builtins(p, at);
      note_fault(p, std::string(f.waiting[size_t(at)]) + " not reached by every thread (" + std::to_string(live) +
                        " threads wait, none can proceed): a barrier in divergent code?");
    }
  }
  f.current = -1;
  t_index = -1;
}

// One block on the calling thread, its threads one after another: for launches whose first
// block never synchronized (elementwise kernels), where a thread each buys nothing.
void run_serial(Pool& p, int n) {
  const uint3 saved_t = threadIdx, saved_b = blockIdx;
  const dim3 saved_bd = blockDim, saved_gd = gridDim;
  for (int i = 0; i < n; ++i) {
    t_index = kSerial;
    set_builtins(p, i);
    run_body(p);
    if (!p.fault.empty()) break;
  }
  t_index = -1;
  threadIdx = saved_t, blockIdx = saved_b, blockDim = saved_bd, gridDim = saved_gd;
}
}  // namespace

uint64_t emu_seed() {
  static const uint64_t seed = [] {
    const char* v = std::getenv("NUNCHAKU_CUDA_EMU_SEED");
    return v && *v ? std::strtoull(v, nullptr, 10) : uint64_t(1);
  }();
  return seed;
}

void set_barrier_timeout_ms(int ms) { g_stuck_ms = ms > 0 ? ms : 20000; }

std::string run_grid(dim3 grid, dim3 block, const std::function<void()>& body) {
  Pool& p = pool();
  const int n = int(block.x * block.y * block.z);
  grow(p, n);
  p.body = &body;
  p.bdim = block;
  p.gdim = grid;
  p.nthreads = n;
  p.synced = false;
  while (int(p.warps.size()) < (n + 31) / 32) p.warps.push_back(std::make_unique<Warp>());
  bool first = true;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        p.block_idx = {x, y, z};
        poison_shared();
        // The first block runs threaded; the rest too once any thread synchronized.
        if (first || p.synced) use_fibers() ? run_fibers(p, n) : run_threaded(p, n);
        else run_serial(p, n);
        first = false;
        std::lock_guard lk(p.fault_m);
        if (!p.fault.empty()) {
          std::string f;
          f.swap(p.fault);
          return f;
        }
      }
  return {};
}

void syncthreads() {
  entering_sync("__syncthreads");
  pool().block_bar.wait("__syncthreads");
}

// The lanes of `mask` must be every lane still running in the warp: the emulator's warp
// barrier is over the whole warp (the kernels here only use full-warp masks).
static void check_mask(Warp& w, unsigned mask, const char* what) {
  const int lane = t_index % 32;
  const uint32_t all = w.lanes == 32 ? 0xffffffffu : ((1u << w.lanes) - 1);
  const uint32_t live = all & ~w.exited.load();
  if (!((mask >> lane) & 1u)) throw Fault(std::string(what) + " called by a lane outside its mask");
  if ((mask & all) != live)
    throw Fault(std::string(what) + " with mask 0x" + [&] {
      char b[16];
      std::snprintf(b, sizeof b, "%08x", mask);
      return std::string(b);
    }() + " while the live lanes are 0x" + [&] {
      char b[16];
      std::snprintf(b, sizeof b, "%08x", live);
      return std::string(b);
    }() + " (exited lanes named, or a partial mask the emulator does not model)");
}

void syncwarp(unsigned mask) {
  entering_sync("__syncwarp");
  Warp& w = my_warp();
  check_mask(w, mask, "__syncwarp");
  w.bar.wait("__syncwarp");
}

uint64_t shfl(unsigned mask, uint64_t v, int arg, int width, int mode) {
  entering_sync("__shfl_sync");
  Warp& w = my_warp();
  check_mask(w, mask, "__shfl_sync");
  if (width < 1 || width > 32 || (width & (width - 1))) throw Fault("shuffle width " + std::to_string(width));
  const int lane = t_index % 32, base = lane & ~(width - 1);
  int src;
  switch (mode) {
    case 0: src = lane ^ arg; break;
    case 1: src = lane + arg; break;
    case 2: src = base + (arg & (width - 1)); break;
    default: src = lane - arg; break;
  }
  const bool own = src < base || src >= base + width || src >= w.lanes;  // outside the segment: own value
  const uint64_t n = ++pool().shfl_count[size_t(t_index)];
  const int ph = int(n & 1);
  w.slot[ph][lane] = v;
  w.seq[ph][lane] = n;
  w.bar.wait("__shfl_sync");
  // Every lane counts its shuffles: a lane of the mask with another count did not take this
  // one (it exited or diverged), which a GPU leaves undefined.
  for (int l = 0; l < w.lanes; ++l)
    if (((mask >> l) & 1u) && w.seq[ph][l] != n)
      throw Fault("__shfl_sync: lane " + std::to_string(l) + " of the mask did not take part in the shuffle");
  return own ? v : w.slot[ph][src];
}

}  // namespace nk_emu
