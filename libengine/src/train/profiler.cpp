#include "pstar/train/profiler.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "pstar/base/error.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/train/metrics.h"

namespace pstar::train {

using Clock = std::chrono::steady_clock;

struct Profiler::Impl {
  formats::Profile profile;
  std::chrono::microseconds period;
  memory::CpuAllocationCounter& counter = memory::CpuAllocationCounter::instance();
  std::optional<Clock::time_point> start;
  bool in_step = false;
  int64_t step = 0;
  int64_t step_moment = 0;  // moments so far in this step
  bool moment_open = false;

  // Note [profile names]
  // Moment names repeat every step, so each distinct one is kept once and a row holds its index;
  // the names column is filled only when the profile is read (data(), write()). A string per row,
  // kept for the rest of the run, used to land among the step's tensors in malloc's heap, whose
  // free space then fragmented and grew by about 9 MiB a step for gpt-mini, every page of it
  // faulted in afresh (issue 23). Recording a moment now keeps nothing new on the heap but an
  // index, and the columns grow geometrically.
  std::vector<std::string> names;  // distinct, in first-seen order
  std::unordered_map<std::string, int32_t> name_index;
  std::vector<int32_t> row_names;  // per by_moment row

  void fill_names() {
    std::vector<std::string>& column = profile.by_moment.name;
    for (size_t r = column.size(); r < row_names.size(); ++r)
      column.push_back(names[static_cast<size_t>(row_names[r])]);
  }

  // Shared with the sampler thread.
  std::atomic<int64_t> device_chunks{0}, host_chunks{0};
  std::atomic<int8_t> stage{0};
  std::atomic<bool> sampling{false};
  std::mutex mutex;  // guards profile.by_time and stop
  std::condition_variable wake;
  bool stop = false;
  std::thread sampler;

  double now() const { return std::chrono::duration<double>(Clock::now() - *start).count(); }

  int64_t row() const { return static_cast<int64_t>(profile.by_moment.size()) - 1; }

  void sample_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      if (sampling.load()) {
        auto& t = profile.by_time;
        const int64_t device = device_chunks.load(), non_model = counter.current_bytes();
        t.time_s.push_back(now());
        t.stage.push_back(stage.load());
        t.device_chunks.push_back(device);
        t.device_non_model.push_back(non_model);
        t.device_total.push_back(device + non_model);
        t.host_chunks.push_back(host_chunks.load());
        t.host_non_model.push_back(0);
        t.host_total.push_back(host_chunks.load());
      }
      wake.wait_for(lock, period);
    }
  }

  void stop_sampler() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    if (sampler.joinable()) sampler.join();
  }
};

Profiler::Profiler(std::chrono::microseconds period) : impl_(std::make_unique<Impl>()) {
  // A build without HDF5 could record but never write the file: say so before the run, not after.
  formats::require_profile_io("--profile");
  impl_->period = period;
  impl_->sampler = std::thread([this] { impl_->sample_loop(); });
}

Profiler::~Profiler() { impl_->stop_sampler(); }

formats::Profile& Profiler::data() {
  impl_->fill_names();
  return impl_->profile;
}
bool Profiler::recording() const { return impl_->in_step; }

void Profiler::begin_step(int64_t step) {
  Impl& s = *impl_;
  if (!s.start) s.start = Clock::now();
  s.in_step = true;
  s.step = step;
  s.step_moment = 0;
  s.sampling = true;
}

void Profiler::attach(const engine::EngineShape& shape) {
  formats::ProfileRun& run = data().run;
  run.chunk_size = shape.chunk_size;
  run.num_chunks = shape.num_chunks;
  run.compute_bytes_per_chunk = shape.compute_bytes_per_chunk;
  run.optimizer_bytes_per_chunk = shape.optimizer_bytes_per_chunk;
  run.device_budget = shape.device_budget;
  run.host_budget = shape.host_budget;
  run.world_size = shape.world_size;
  run.rank = shape.rank;
  run.warmup_iterations = shape.warmup_iterations;
  data().chunks = shape.chunks;
}

void Profiler::end_step(const StepMetrics& m) {
  Impl& s = *impl_;
  if (!s.in_step) return;
  if (s.moment_open) close_moment(s.counter.peak_bytes());
  s.sampling = false;
  s.in_step = false;
  auto& t = s.profile.steps;
  t.step.push_back(m.step);
  t.time_s.push_back(m.step_time_s);
  t.forward_s.push_back(m.times.forward_s);
  t.backward_s.push_back(m.times.backward_s);
  t.optimizer_s.push_back(m.times.optimizer_s);
  t.loss.push_back(m.loss);
  t.device_peak_bytes.push_back(m.engine.device_peak_bytes);
  t.host_peak_bytes.push_back(m.engine.host_peak_bytes);
  t.moved_h2d_bytes.push_back(m.engine.moved_h2d_bytes);
  t.moved_d2h_bytes.push_back(m.engine.moved_d2h_bytes);
  s.profile.run.steps = static_cast<int64_t>(t.size());
}

void Profiler::begin_moment(const std::string& name, formats::ProfileStage stage,
                            const MemorySample& memory, std::vector<int8_t> places) {
  Impl& s = *impl_;
  if (!s.in_step) return;
  if (s.moment_open) close_moment(0);  // the engine closes each moment; never reached
  auto& m = s.profile.by_moment;
  m.step.push_back(s.step);
  m.moment.push_back(s.step_moment++);
  auto [it, added] = s.name_index.try_emplace(name, static_cast<int32_t>(s.names.size()));
  if (added) s.names.push_back(name);
  s.row_names.push_back(it->second);
  m.stage.push_back(static_cast<int8_t>(stage));
  m.time_s.push_back(s.now());
  m.device_chunks.push_back(memory.device_chunks);
  m.device_non_model.push_back(memory.device_non_model);
  m.device_total.push_back(memory.device_chunks + memory.device_non_model);
  m.host_chunks.push_back(memory.host_chunks);
  m.host_non_model.push_back(memory.host_non_model);
  m.host_total.push_back(memory.host_chunks + memory.host_non_model);
  PSTAR_INTERNAL_ASSERT(s.profile.chunks.size() == places.size(), "profile: ", places.size(),
                        " chunk places for ", s.profile.chunks.size(), " chunks");
  s.profile.location.insert(s.profile.location.end(), places.begin(), places.end());
  s.stage = static_cast<int8_t>(stage);
  s.moment_open = true;
}

void Profiler::close_moment(int64_t device_non_model_peak) {
  Impl& s = *impl_;
  if (!s.moment_open) return;
  auto& m = s.profile.by_moment;
  const auto r = static_cast<size_t>(s.row());
  m.device_non_model[r] = std::max(m.device_non_model[r], device_non_model_peak);
  m.device_total[r] = m.device_chunks[r] + m.device_non_model[r];
  s.moment_open = false;
}

void Profiler::event(int64_t chunk, formats::ChunkEventKind kind, int64_t bytes,
                     double duration_s) {
  Impl& s = *impl_;
  if (!s.in_step) return;
  auto& e = s.profile.events;
  e.time_s.push_back(s.now());
  e.step.push_back(s.step);
  // Between moments the engine is preparing the next one (moves, gathers): the event is its.
  e.moment.push_back(s.moment_open ? s.row() : s.row() + 1);
  e.chunk.push_back(chunk);
  e.kind.push_back(static_cast<int8_t>(kind));
  e.bytes.push_back(bytes);
  e.duration_s.push_back(duration_s);
}

void Profiler::set_chunk_bytes(int64_t device, int64_t host) {
  impl_->device_chunks = device;
  impl_->host_chunks = host;
}

void Profiler::write(const std::string& path) {
  impl_->stop_sampler();
  impl_->fill_names();
  formats::write_profile(path, impl_->profile);
}

}  // namespace pstar::train
