// Persistent thread pool: workers spin for a short while after each job and then sleep on a
// condition variable, so the many small parallel regions of a decode step stay cheap.
// A task that throws (std::bad_alloc in a kernel's scratch, ...) never escapes a worker thread
// (that would std::terminate the process): the worker keeps the first exception, finishes its
// share of the barrier, and run() rethrows it on the calling thread once every worker is done.
#include <atomic>
#include <chrono>
#include <exception>
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

  int size() const { return nthreads_; }

  void resize(int n) {
    if (n < 1) n = 1;
    std::lock_guard<std::mutex> run_lock(run_mu_);
    stop();
    nthreads_ = n;
    quit_ = false;
    // New workers start from the current generation: stop() bumped it, and a worker that took
    // that bump for a job would run a stale fn_ (seen after setThreads(1) -> setThreads(2)).
    uint64_t g0 = generation_.load(std::memory_order_acquire);
    for (int i = 1; i < n; i++) workers_.emplace_back([this, i, g0] { worker(i, g0); });
  }

  void run(int nth, const std::function<void(int, int)>& fn) {
    if (nth > nthreads_) nth = nthreads_;
    if (nth <= 1 || t_in_pool) {
      fn(0, 1);
      return;
    }
    std::lock_guard<std::mutex> run_lock(run_mu_);
    error_ = nullptr;
    fn_ = &fn;
    active_ = nth;
    pending_.store(nth - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lk(mu_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    t_in_pool = true;
    try {
      fn(0, nth);
    } catch (...) {
      t_in_pool = false;
      wait_done();
      throw;
    }
    t_in_pool = false;
    wait_done();
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  // The caller finished its share; wait for the workers. Spin briefly (a worker normally
  // finishes within microseconds of the caller), then yield the core: on an oversubscribed
  // machine the worker we wait for may be queued behind us on the same core, and a long spin
  // would only delay it (measured: 2-thread decode 5x slower than 1 thread under load).
  void wait_done() {
    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; spins++) {
      if (spins < 4096) LOOM_PAUSE();
      else std::this_thread::yield();
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
      if (id < active_) {
        try {
          (*fn_)(id, active_);
        } catch (...) {
          std::lock_guard<std::mutex> lk(err_mu_);
          if (!error_) error_ = std::current_exception();
        }
        pending_.fetch_sub(1, std::memory_order_acq_rel);  // release: error_ is visible to run()
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

  int nthreads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serializes callers from different OS threads
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
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

void pool_run(int nth, const std::function<void(int, int)>& fn) { pool().run(nth, fn); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t max_chunks = (n + grain - 1) / grain;
  int nth = int(std::min<int64_t>(max_chunks, threads_get()));
  if (nth <= 1) {
    fn(0, n);
    return;
  }
  pool_run(nth, [&](int tid, int nt) {
    int64_t per = (n + nt - 1) / nt;
    int64_t b = tid * per, e = std::min<int64_t>(n, b + per);
    if (b < e) fn(b, e);
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
  pool_run(nth, [&](int, int) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed))
      fn(i);
  });
}

}  // namespace loom
