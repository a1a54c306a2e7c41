// Persistent thread pool: workers spin for a short while after each job and then sleep on a
// condition variable, so the many small parallel regions of a decode step stay cheap.
// A task that throws (std::bad_alloc in a kernel's scratch, ...) never escapes a worker thread
// (that would std::terminate the process): the worker keeps the first exception, finishes its
// share of the barrier, and run() rethrows it on the calling thread once every worker is done.
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>
#include "loom/core.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() std::this_thread::yield()
#endif

namespace loom {

namespace {

thread_local bool t_in_pool = false;
constexpr std::chrono::microseconds kSpinWait{50};  // a worker's spin for the next job before it sleeps

class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return nthreads_.load(std::memory_order_relaxed); }

  void resize(int n) {
    if (n < 1) n = 1;
    std::lock_guard<std::mutex> run_lock(run_mu_);
    stop();
    nthreads_.store(n, std::memory_order_relaxed);
    quit_ = false;
    tickets_.reset(new std::atomic<uint64_t>[size_t(n)]);
    for (int id = 0; id < n; id++) tickets_[size_t(id)].store(~uint64_t(0), std::memory_order_relaxed);  // no job
    // New workers start from the current generation: stop() bumped it, and a worker that took
    // that bump for a job would run a stale fn_ (seen after setThreads(1) -> setThreads(2)).
    uint64_t g0 = generation_.load(std::memory_order_acquire);
    for (int i = 1; i < n; i++) workers_.emplace_back([this, i, g0] { worker(i, g0); });
  }

  // dynamic: fn's shares take their work from a shared counter (pool_run_dynamic), so once the caller's own share
  // has returned nothing is left unclaimed, and a worker's share that has not started by then may be skipped
  void run(int nth, const std::function<void(int, int)>& fn, bool dynamic) {
    if (nth <= 1 || t_in_pool) {
      fn(0, 1);
      return;
    }
    std::unique_lock<std::mutex> run_lock(run_mu_);
    // clamped under the lock: a resize from another thread (setThreads while a model call runs on the libuv pool)
    // may have shrunk the pool since the caller asked, and a share for a worker that no longer exists was waited for
    // forever (test/native/core.test.ts, poolStress)
    const int size = nthreads_.load(std::memory_order_relaxed);
    if (nth > size) nth = size;
    if (nth <= 1) {
      run_lock.unlock();
      fn(0, 1);
      return;
    }
    error_ = nullptr;
    fn_ = &fn;
    active_ = nth;
    const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
    for (int id = 1; id < nth; id++) tickets_[size_t(id)].store(g << 2 | kOpen, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(mu_);
      generation_.store(g, std::memory_order_release);  // publishes fn_, active_ and the tickets
    }
    cv_.notify_all();
    t_in_pool = true;
    std::exception_ptr own;
    try {
      fn(0, nth);
    } catch (...) {
      own = std::current_exception();
    }
    t_in_pool = false;
    wait_done(g, nth, dynamic);
    if (own) std::rethrow_exception(own);
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  // The caller finished its share; wait for the workers' shares of job g. A dynamic job's share that no worker has
  // started is closed instead (a worker that wakes later finds it taken and skips it): on cores shared with other
  // processes the worker is often not running when a region starts (preempted, or asleep after kSpinWait), and
  // waiting for it to be scheduled cost more than the region (Qwen2.5-0.5B Q4_K_M decode, 2 threads beside another
  // process's 1.6 cores: 22.4 ms CPU and 44 tok/s a token against 12.0 ms and 83 tok/s on 1 thread). A started
  // share is waited for: spin briefly (a worker normally finishes within microseconds of the caller), then yield
  // the core: on an oversubscribed machine the worker we wait for may be queued behind us on the same core, and a
  // long spin would only delay it (measured: 2-thread decode 5x slower than 1 thread under load).
  void wait_done(uint64_t g, int nth, bool dynamic) {
    for (int id = 1; id < nth; id++) {
      std::atomic<uint64_t>& t = tickets_[size_t(id)];
      uint64_t open = g << 2 | kOpen;
      if (dynamic && t.compare_exchange_strong(open, g << 2 | kClosed, std::memory_order_acq_rel)) continue;
      for (int spins = 0; t.load(std::memory_order_acquire) != (g << 2 | kDone); spins++) {
        if (spins < 4096) LOOM_PAUSE();
        else std::this_thread::yield();
      }
    }
  }

  void worker(int id, uint64_t start_generation) {
    t_in_pool = true;
    uint64_t seen = start_generation;
    for (;;) {
      // Spin a little for the next job (kSpinWait: the gaps between a step's regions are microseconds), then
      // sleep. A longer spin (20,000 pauses, 0.6 ms on the EPYC dev machine) cost a loaded machine: in a DPO
      // step on 2 threads at load 3-7 (other processes on both cores), 10-14 % of the process's samples were
      // this loop, CPU time the scheduler then charged to the worker instead of running the caller.
      uint64_t g = generation_.load(std::memory_order_acquire);
      const auto t0 = std::chrono::steady_clock::now();
      for (int spins = 1; g == seen; spins++) {
        LOOM_PAUSE();
        g = generation_.load(std::memory_order_acquire);
        if (spins % 64 == 0 && std::chrono::steady_clock::now() - t0 > kSpinWait) break;
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return quit_ || generation_.load(std::memory_order_acquire) != seen; });
        if (quit_) return;
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (quit_) return;
      // the share of job g, unless the caller closed it (or g gave this worker none): fn_ and active_ are read only
      // once the ticket is taken, as the caller moves on to the next job only after this share is done
      std::atomic<uint64_t>& t = tickets_[size_t(id)];
      uint64_t open = g << 2 | kOpen;
      if (t.compare_exchange_strong(open, g << 2 | kTaken, std::memory_order_acq_rel)) {
        try {
          (*fn_)(id, active_);
        } catch (...) {
          std::lock_guard<std::mutex> lk(err_mu_);
          if (!error_) error_ = std::current_exception();
        }
        t.store(g << 2 | kDone, std::memory_order_release);  // release: error_ is visible to run()
      }
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      quit_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::atomic<int> nthreads_{1};
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serializes callers from different OS threads
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  // per worker id, the state of its share of the latest job: generation << 2 | kOpen / kTaken (by the worker) /
  // kDone / kClosed (by the caller, unstarted)
  static constexpr uint64_t kOpen = 0, kTaken = 1, kDone = 2, kClosed = 3;
  std::unique_ptr<std::atomic<uint64_t>[]> tickets_;
  const std::function<void(int, int)>* fn_ = nullptr;
  std::mutex err_mu_;
  std::exception_ptr error_;  // first exception a worker's share threw in the current run()
  int active_ = 0;
  bool quit_ = false;
};

int default_threads() {
  if (const char* s = std::getenv("LOOM_THREADS")) {
    int n = std::atoi(s);
    if (n >= 1) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(hc) : 1;
}

Pool& pool() {
  static Pool* p = new Pool(default_threads());  // never destroyed: workers may outlive statics
  return *p;
}

}  // namespace

int threads_get() { return pool().size(); }

void threads_set(int n) {
  if (n < 1) throw std::invalid_argument("thread count must be >= 1");
  pool().resize(n);
}

void pool_run(int nth, const std::function<void(int, int)>& fn) { pool().run(nth, fn, false); }

void pool_run_dynamic(int nth, const std::function<void(int, int)>& fn) { pool().run(nth, fn, true); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t max_chunks = (n + grain - 1) / grain;
  int nth = int(std::min<int64_t>(max_chunks, threads_get()));
  if (nth <= 1) {
    fn(0, n);
    return;
  }
  // nth chunks, each taken by whichever thread comes first: a worker that is not running when the region starts
  // (preempted, or asleep) leaves its chunk to the caller instead of holding it up (SmolLM2-135M Q4_K_M at 32
  // streams, 2 threads beside other processes: 10 % of the samples were the caller waiting in swiglu's and rope's
  // regions of a few microseconds)
  const int64_t per = (n + nth - 1) / nth;
  std::atomic<int> next{0};
  pool_run_dynamic(nth, [&](int, int) {
    for (int c = next.fetch_add(1, std::memory_order_relaxed); c < nth;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t b = c * per, e = std::min<int64_t>(n, b + per);
      if (b < e) fn(b, e);
    }
  });
}

void parallel_tasks(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  int nth = int(std::min<int64_t>(n, threads_get()));
  if (nth <= 1) {
    for (int64_t i = 0; i < n; i++) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  pool_run_dynamic(nth, [&](int, int) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed))
      fn(i);
  });
}

}  // namespace loom
