// The chunk engine against a checking tier (tests/engine/tier): CheckingTier wraps the emulated
// tier and holds the engine to the device tier's contract (every kernel is told the side its
// buffers are really on, copies land before use, off-thread Adam never overlaps anything that
// touches its buffers; the Ledger records what it saw), and ChunkedEngineOnATier trains a small
// GPT through the trainer on such a tier. Shared by device_tier_test.cpp and
// speculative_adam_test.cpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/cpu_plan.h"
#include "engine/small_gpt_config.h"
#include "engine/tier/tier_ledger.h"
#include "pstar/base/error.h"
#include "pstar/checkpoint/run_checkpoint.h"
#include "pstar/chunk/access_trace.h"
#include "pstar/data/training_data.h"
#include "pstar/dist/communicator.h"
#include "pstar/engine/chunked_engine.h"
#include "pstar/formats/config.h"
#include "pstar/memory/cpu_counter.h"
#include "pstar/model/gpt.h"
#include "pstar/model/hooks.h"
#include "pstar/model/init.h"
#include "pstar/model/model_shape.h"
#include "pstar/optim/host_adam.h"
#include "pstar/plan/memory_plan.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/trainer.h"
#include "test_util.h"

namespace pstar::tier::testing {

// ---- the chunk engine against the contract --------------------------------------------------

// The emulated tier, with every call checked against the blocks it handed out.
class CheckingTier final : public DeviceTier {
 public:
  CheckingTier(std::shared_ptr<Ledger> ledger, int64_t capacity)
      : inner_(make_emulated_tier()), ledger_(std::move(ledger)), capacity_(capacity) {}

  // Host Adam called from another thread sleeps this long first, so that anything that touches
  // its buffers without waiting for it does so while it is still running.
  void set_off_thread_adam_delay(std::chrono::milliseconds delay) { delay_ = delay; }
  // Reports this footprint, and LibTorch's reserved memory as `reserved_extra` above the allocated
  // peak (Note [device footprint]), as a CUDA tier would.
  void set_footprint(Footprint footprint, int64_t reserved_extra) {
    footprint_ = footprint;
    reserved_extra_ = reserved_extra;
  }

  // Note [fragmented arena]: a move's device destination that would take the device's live bytes
  // past `bytes` fails as an arena with no contiguous range left would, though placement counted
  // room for it; `refused` counts those.
  void set_contiguous_limit(int64_t bytes) { contiguous_limit_ = bytes; }
  // Says that the host cannot address the device side, as the CUDA tier does, so that collectives
  // stage device payloads through host blocks (Note [staged collectives]).
  void set_host_addresses_device(bool yes) { host_addresses_device_ = yes; }
  // A host block released after a copy to the device read it goes back to its pool only after the
  // next host allocation, as on the CUDA tier, where the copy may still be queued (Note
  // [stream-ordered reuse]): a move meanwhile takes another block, so the pools need more than a
  // step's payloads at its end (at the optimizer step, which brings every chunk back), as a GPU
  // run's do.
  void set_deferred_host_release(bool yes) {
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    ledger_->defer_host_release = yes;
  }
  bool host_addresses_device() const override { return host_addresses_device_; }
  int64_t refused() const { return refused_; }

  std::string describe() const override { return "checked, " + inner_->describe(); }
  c10::Device compute_device() const override { return inner_->compute_device(); }
  c10::Device device_of(Side side) const override { return inner_->device_of(side); }
  int64_t device_capacity_bytes() const override { return capacity_; }

  Block allocate(Side side, int64_t bytes) override {
    if (side == Side::kHost) reap();
    return track(inner_->allocate(side, bytes), side, bytes);
  }
  // Filled with a pattern that no payload holds at start-up (NaNs in every float type): whatever
  // reads it before a copy has written it would show in the losses.
  Block allocate_uninitialized(Side side, int64_t bytes) override {
    if (side == Side::kDevice) {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      if (ledger_->live_bytes[0] + bytes > contiguous_limit_) {
        ++refused_;
        PSTAR_THROW(OutOfMemoryError, "checking tier: no contiguous range of ", bytes,
                    " bytes (a fragmented arena)");
      }
    }
    if (side == Side::kHost) reap();
    Block block = inner_->allocate_uninitialized(side, bytes);
    std::memset(block.data(), 0xFF, static_cast<size_t>(bytes));
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      ++ledger_->uninitialized_allocations;
    }
    return track(std::move(block), side, bytes, /*host_only=*/false, /*moved=*/true);
  }

  Block allocate_host_only(int64_t bytes) override {
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      ++ledger_->host_only_allocations;
    }
    reap();
    return track(inner_->allocate_host_only(bytes), Side::kHost, bytes, /*host_only=*/true);
  }

  void reserve_host(int64_t bytes, int64_t count) override {
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      ledger_->reserved_host_blocks += count;
    }
    inner_->reserve_host(bytes, count);
  }

  // Filled with the NaN pattern too: a start-up payload the engine does not write whole (values
  // and padding) would show in the losses.
  Block allocate_unfilled(Side side, int64_t bytes, bool host_only) override {
    Block block = inner_->allocate_unfilled(side, bytes, host_only);
    std::memset(block.data(), 0xFF, static_cast<size_t>(bytes));
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      ++ledger_->unfilled_allocations;
      if (host_only) ++ledger_->host_only_allocations;
    }
    return track(std::move(block), side, bytes, host_only);
  }

  // The ledger's record of a block from the inner tier, kept until the block is released.
  Block track(Block inner_block, Side side, int64_t bytes, bool host_only = false,
              bool moved = false) {
    struct Owner final : Block::Owner {
      Block inner;
      std::shared_ptr<Ledger> ledger;
      ~Owner() override {
        const std::lock_guard<std::mutex> lock(ledger->mutex);
        ledger->touch(inner.data(), inner.bytes(), "a released block");
        ledger->ahead.erase(reinterpret_cast<uintptr_t>(inner.data()));
        const auto address = reinterpret_cast<uintptr_t>(inner.data());
        const bool copied = ledger->copy_sources.erase(address) != 0;
        if (ledger->defer_host_release && inner.side() == Side::kHost && copied) {
          ledger->retired.emplace_back(std::move(inner), 0);
          ++ledger->retired_blocks;
        }
        const auto it = ledger->live.find(address);
        ledger->live_bytes[static_cast<int>(it->second.side)] -= it->second.bytes;
        ledger->live.erase(it);
      }
    };
    auto owner = std::make_unique<Owner>();
    owner->inner = std::move(inner_block);
    owner->ledger = ledger_;
    void* data = owner->inner.data();
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    ledger_->live[reinterpret_cast<uintptr_t>(data)] = Ledger::Range{bytes, side, host_only, moved};
    int64_t& live = ledger_->live_bytes[static_cast<int>(side)];
    live += bytes;
    if (side == Side::kDevice)
      ledger_->peak_device_bytes = std::max(ledger_->peak_device_bytes, live);
    return Block(data, bytes, side, std::move(owner));
  }
  void copy(Block& dst, const Block& src, int64_t bytes) override {
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    ledger_->expect_idle(src.data(), bytes, "a copy's source");
    ledger_->expect_idle(dst.data(), bytes, "a copy's destination");
    ledger_->expect_inside(src.data(), bytes, src.side(), "a copy's source");
    ledger_->expect_inside(dst.data(), bytes, dst.side(), "a copy's destination");
    ledger_->touch(src.data(), bytes, "a copy's source");
    ledger_->touch(dst.data(), bytes, "a copy's destination");
    ledger_->copied[static_cast<int>(src.side())][static_cast<int>(dst.side())] += bytes;
    ledger_->note_copy_of(src.data(), bytes);
    ledger_->note_copy_of(dst.data(), bytes);
    if (src.side() == Side::kHost && dst.side() == Side::kDevice)
      ledger_->copy_sources.insert(reinterpret_cast<uintptr_t>(src.data()));
    // The tier's own copies follow its copies ahead.
    ledger_->land(src.data());
    ledger_->land(dst.data());
    inner_->copy(dst, src, bytes);
  }
  // Lazier than any real tier: the bytes reach dst only when the engine awaits them, so compute
  // that ran without waiting would see zeros, and the losses would show it.
  void copy_ahead(Block& dst, const Block& src, int64_t bytes) override {
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    ledger_->expect_idle(src.data(), bytes, "a copy ahead's source");
    ledger_->expect_inside(src.data(), bytes, src.side(), "a copy ahead's source");
    ledger_->expect_inside(dst.data(), bytes, dst.side(), "a copy ahead's destination");
    if (dst.side() != Side::kDevice) ledger_->violations.push_back("a copy ahead into the host");
    ledger_->touch(src.data(), bytes, "a copy ahead's source");
    ledger_->touch(dst.data(), bytes, "a copy ahead's destination");
    ledger_->copied[static_cast<int>(src.side())][static_cast<int>(dst.side())] += bytes;
    ledger_->note_copy_of(src.data(), bytes);
    ledger_->copied_ahead += bytes;
    ledger_->land(src.data());
    const auto* from = static_cast<const uint8_t*>(src.data());
    ledger_->ahead[reinterpret_cast<uintptr_t>(dst.data())].assign(from, from + bytes);
    if (src.side() == Side::kHost && dst.side() == Side::kDevice)
      ledger_->copy_sources.insert(reinterpret_cast<uintptr_t>(src.data()));
  }
  void await_copies(const Block& block) override {
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    if (ledger_->land(block.data())) ++ledger_->awaited;
  }
  void zero(Block& block, int64_t bytes) override {
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      ledger_->expect_idle(block.data(), bytes, "a zeroed range");
      ledger_->expect_inside(block.data(), bytes, block.side(), "a zeroed range");
      ledger_->expect_landed(block.data(), "a zeroed block");
      ledger_->touch(block.data(), bytes, "a zeroed range");
    }
    inner_->zero(block, bytes);
  }
  void adam_step(Side side, const optim::AdamHyper& hyper, float grad_multiplier,
                 const optim::AdamSpan& span) override {
    const int64_t grad_bytes = span.numel * (span.grad_type == optim::GradType::kF32 ? 4 : 2);
    // Out of place (Note [speculative adam]), the state written goes to the *_out buffers: they
    // are held to the same rules.
    const std::pair<const void*, int64_t> buffers[] = {
        {span.master, span.numel * 4},      {span.exp_avg, span.numel * 4},
        {span.exp_avg_sq, span.numel * 4},  {span.grad, grad_bytes},
        {span.param_out, span.numel * 2},   {span.master_out, span.numel * 4},
        {span.exp_avg_out, span.numel * 4}, {span.exp_avg_sq_out, span.numel * 4}};
    const bool off_thread = std::this_thread::get_id() != owner_thread_;
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      ledger_->expect_inside(span.master, span.numel * 4, side, "Adam's master");
      ledger_->expect_inside(span.exp_avg, span.numel * 4, side, "Adam's exp_avg");
      ledger_->expect_inside(span.exp_avg_sq, span.numel * 4, side, "Adam's exp_avg_sq");
      ledger_->expect_inside(span.grad, grad_bytes, side, "Adam's gradient");
      ledger_->expect_inside(span.param_out, span.numel * 2, side, "Adam's parameter copy");
      if (span.master_out != nullptr) {
        ++ledger_->adam_out_of_place;
        const std::string isa = optim::host_adam_isa();
        const optim::detail::Isa in_use = isa == "avx512" ? optim::detail::Isa::kAvx512
                                          : isa == "avx2" ? optim::detail::Isa::kAvx2
                                                          : optim::detail::Isa::kScalar;
        if (optim::detail::streaming_begin(span, 0, span.numel,
                                           optim::detail::stream_lanes(in_use)) == 0)
          ++ledger_->adam_out_of_place_streamed;
        ledger_->expect_inside(span.master_out, span.numel * 4, side, "Adam's new master");
        ledger_->expect_inside(span.exp_avg_out, span.numel * 4, side, "Adam's new exp_avg");
        ledger_->expect_inside(span.exp_avg_sq_out, span.numel * 4, side, "Adam's new exp_avg_sq");
      }
      const void* touched[] = {span.master, span.grad, span.param_out};
      for (const void* p : touched) ledger_->expect_landed(p, "a buffer Adam updates");
      for (const auto& [p, bytes] : buffers) {
        ledger_->expect_idle(p, bytes, "a buffer Adam updates");
        ledger_->touch(p, bytes, "a buffer Adam updates");
      }
      ++ledger_->adam_calls[static_cast<int>(side)];
      if (off_thread) {
        if (side != Side::kHost) ledger_->violations.push_back("device Adam off the main thread");
        ++ledger_->adam_off_thread;
        for (size_t i = 0; i < std::size(buffers); ++i) {
          const auto& [p, bytes] = buffers[i];
          if (p == nullptr) continue;
          const auto a = reinterpret_cast<uintptr_t>(p);
          ranges_of(span, i).emplace_back(a, a + static_cast<uintptr_t>(bytes));
        }
      }
    }
    if (off_thread) std::this_thread::sleep_for(delay_);
    inner_->adam_step(side, hyper, grad_multiplier, span);
    if (off_thread) {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      for (size_t i = 0; i < std::size(buffers); ++i) {
        const auto& [p, bytes] = buffers[i];
        if (p == nullptr) continue;
        const auto a = reinterpret_cast<uintptr_t>(p);
        auto& ranges = ranges_of(span, i);
        const auto it = std::find(ranges.begin(), ranges.end(),
                                  std::make_pair(a, a + static_cast<uintptr_t>(bytes)));
        if (it != ranges.end()) ranges.erase(it);
      }
    }
  }
  // Where adam_step's buffer i (in its order: master, moments, gradient, then what it writes) is
  // held while an off-thread Adam runs: out of place, the first four are only read.
  std::vector<std::pair<uintptr_t, uintptr_t>>& ranges_of(const optim::AdamSpan& span, size_t i) {
    return span.master_out != nullptr && i < 4 ? ledger_->reading : ledger_->busy;
  }
  double grad_sq_sum(Side side, const void* grad, optim::GradType grad_type,
                     int64_t numel) override {
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      const int64_t bytes = numel * (grad_type == optim::GradType::kF32 ? 4 : 2);
      ledger_->expect_idle(grad, bytes, "a gradient summed", /*read=*/true);
      ledger_->expect_inside(grad, bytes, side, "a gradient summed");
      ledger_->touch(grad, bytes, "a gradient summed");
      if (std::this_thread::get_id() == owner_thread_) ++ledger_->sums_on_owner_thread;
      ledger_->expect_landed(grad, "a gradient summed");
    }
    return inner_->grad_sq_sum(side, grad, grad_type, numel);
  }
  int64_t non_model_bytes() override { return inner_->non_model_bytes(); }
  int64_t non_model_peak_bytes() override { return inner_->non_model_peak_bytes(); }
  int64_t reset_non_model_peak() override { return inner_->reset_non_model_peak(); }
  Footprint footprint() override { return footprint_; }
  int64_t non_model_reserved_peak_bytes() override {
    const int64_t reserved = inner_->non_model_peak_bytes() + reserved_extra_;
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    ledger_->reported_reserved_peak = std::max(ledger_->reported_reserved_peak, reserved);
    return reserved;
  }
  void synchronize() override {
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      ++ledger_->synchronizations;
      ledger_->retired.clear();  // every copy has run
      while (!ledger_->ahead.empty())
        ledger_->land(reinterpret_cast<const void*>(ledger_->ahead.begin()->first));
    }
    inner_->synchronize();
  }
  HostMemory host_memory() const override { return inner_->host_memory(); }
  // As the CUDA tier's: the work on released blocks is waited for first, so they return to their
  // pool and go too.
  int64_t trim() override {
    {
      const std::lock_guard<std::mutex> lock(ledger_->mutex);
      ledger_->retired.clear();
    }
    return inner_->trim();
  }

  // Note [communication stream]: a mark is the ledger's sequence number when it was taken, and a
  // scope holds the collective it runs to the checks of Ledger::end_scope_locked.
  std::shared_ptr<const StreamMark> mark_compute() override {
    auto mark = std::make_shared<Mark>();
    mark->ledger = ledger_;
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    if (std::this_thread::get_id() != owner_thread_)
      ledger_->violations.push_back("a compute mark taken off the driving thread");
    ++ledger_->marks;
    mark->seq = ledger_->seq;
    ledger_->open_marks.insert(mark->seq);
    return mark;
  }
  std::unique_ptr<CommStreamScope> enter_comm_stream(const StreamMark* after) override {
    struct Scope final : CommStreamScope {
      std::shared_ptr<Ledger> ledger;
      bool finished = false;
      ~Scope() override {
        if (finished) return;
        const std::lock_guard<std::mutex> lock(ledger->mutex);
        ledger->end_scope_locked();
      }
      void finish() override {
        const std::lock_guard<std::mutex> lock(ledger->mutex);
        ledger->end_scope_locked();
        finished = true;
      }
      // What the engine says its collective uses, checked as what the communicator used.
      void uses(const void* data, int64_t bytes) override {
        ledger->in_flight_locked(data, bytes);
        const std::lock_guard<std::mutex> lock(ledger->mutex);
        ++ledger->declared_uses;
      }
    };
    const auto* mark = dynamic_cast<const Mark*>(after);
    auto scope = std::make_unique<Scope>();
    scope->ledger = ledger_;
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    ++ledger_->comm_scopes;
    if (mark == nullptr) ledger_->violations.push_back("a communication scope without a mark");
    if (std::this_thread::get_id() == owner_thread_)
      ledger_->violations.push_back("the communication stream entered on the driving thread");
    ledger_->scopes[std::this_thread::get_id()] =
        Ledger::Scope{mark != nullptr ? mark->seq : ledger_->seq, {}};
    return scope;
  }

 private:
  void reap() {
    const std::lock_guard<std::mutex> lock(ledger_->mutex);
    ledger_->reap_retired();
  }

  struct Mark final : StreamMark {
    std::shared_ptr<Ledger> ledger;
    int64_t seq = 0;
    ~Mark() override {
      const std::lock_guard<std::mutex> lock(ledger->mutex);
      const auto it = ledger->open_marks.find(seq);
      if (it != ledger->open_marks.end()) ledger->open_marks.erase(it);
    }
  };

  std::unique_ptr<DeviceTier> inner_;
  std::shared_ptr<Ledger> ledger_;
  int64_t capacity_;
  int64_t contiguous_limit_ = std::numeric_limits<int64_t>::max();
  int64_t refused_ = 0;
  bool host_addresses_device_ = true;
  const std::thread::id owner_thread_ = std::this_thread::get_id();
  std::chrono::milliseconds delay_{0};
  Footprint footprint_;
  int64_t reserved_extra_ = 0;
};

// The small GPT built into a chunk engine on `tier`, as build_model_and_engine does, for one
// rank or for this rank of `comm`.
inline train::ModelAndEngine build_small_gpt(const config::TrainConfig& c,
                                             std::unique_ptr<DeviceTier> tier,
                                             dist::Communicator* comm = nullptr,
                                             bool overlap_comm = true,
                                             int64_t reduce_buffer_cap = plan::kReduceBufferBytes) {
  auto shape = model::resolve_gpt_config(c.model);
  const int64_t predicted =
      plan::estimate_gpt_activations(plan::gpt_activation_input(c, shape)).peak;
  plan::RunPlan plan = pstar::testing::cpu_plan(c, comm);
  plan.overlap_comm = overlap_comm;            // Note [collectives beside compute]
  plan.reduce_buffer_cap = reduce_buffer_cap;  // Note [flat gathers]
  auto engine = std::make_unique<engine::ChunkedEngine>(plan, plan::gpt_leaf_modules(shape),
                                                        predicted, comm, std::move(tier));
  engine::UnitValues values;
  values.from = engine::UnitValues::From::kInit;
  values.seed = c.training.seed;
  model::ModelShape model_shape;
  model_shape.family = model::ModelFamily::kGpt;
  model_shape.gpt = shape;
  values.init = [&](const std::string& name) { return model::parameter_init(model_shape, name); };
  model::BuildOptions options;
  options.on_unit_built = [&](torch::nn::Module& unit, const std::string& prefix) {
    engine->register_unit(unit, prefix, values);
  };
  auto gpt = std::make_shared<model::Gpt>(shape, options);
  engine->finish_registration();
  return train::ModelAndEngine{gpt, std::move(engine), {}};
}

class ChunkedEngineOnATier : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = dir_.file("corpus.txt");
    pstar::testing::write_text(corpus_, pstar::testing::repetitive_corpus());
  }

  config::TrainConfig small_config(bool bf16) const {
    config::TrainConfig c = pstar::testing::small_gpt_config(corpus_);
    c.optimizer.weight_decay = 0.01;
    c.training.steps = 6;
    c.bf16.enabled = config::on_off(bf16);
    return c;
  }

  struct Plan {
    int64_t non_model_peak = 0;
    int64_t compute_chunk_bytes = 0;
    int64_t optimizer_chunk_bytes = 0;
    int64_t num_chunks = 0;
    int64_t chunk_size = 0;  // elements
    int64_t params = 0;      // the model's parameters, all in chunks
  };

  // A checkpoint's tensors as plain bytes: LibTorch tensors kept across runs would count as the
  // next run's non-model memory on the emulated tier.
  using StateBytes = std::vector<std::pair<std::string, std::vector<uint8_t>>>;

  static train::ModelAndEngine build(const config::TrainConfig& c,
                                     std::unique_ptr<DeviceTier> tier) {
    return build_small_gpt(c, std::move(tier));
  }

  // Trains `c` on `tier` (null: the default), as build_model_and_engine does, step by step.
  std::vector<train::StepMetrics> run(
      const config::TrainConfig& c, std::unique_ptr<DeviceTier> tier,
      const std::function<void(const train::StepMetrics&)>& after = nullptr,
      Plan* plan_out = nullptr, StateBytes* state_out = nullptr) {
    train::ModelAndEngine built = build(c, std::move(tier));
    auto* raw = dynamic_cast<engine::ChunkedEngine*>(built.engine.get());
    int64_t params = 0;
    for (const auto& p : built.model->parameters()) params += p.numel();
    train::TrainOptions o;
    o.device = "cpu";
    o.progress = false;
    train::Trainer trainer(c, std::move(built), o);
    std::vector<train::StepMetrics> out;
    while (trainer.steps_done() < c.training.steps) {
      out.push_back(trainer.step());
      if (after) after(out.back());
    }
    if (state_out != nullptr) {
      checkpoint::TensorList state;
      raw->state_dict(state);
      for (const auto& [name, tensor] : state) {
        const auto* bytes = static_cast<const uint8_t*>(tensor.data_ptr());
        state_out->emplace_back(name, std::vector<uint8_t>(bytes, bytes + tensor.nbytes()));
      }
    }
    if (plan_out != nullptr) {
      plan_out->compute_chunk_bytes = raw->compute_chunk_bytes();
      plan_out->optimizer_chunk_bytes = raw->optimizer_chunk_bytes();
      plan_out->num_chunks = raw->num_chunks();
      plan_out->chunk_size = raw->chunk_size();
      plan_out->params = params;
      for (int64_t b : raw->trace().non_model_bytes)
        plan_out->non_model_peak = std::max(plan_out->non_model_peak, b);
    }
    return out;
  }

  static std::vector<double> losses(const std::vector<train::StepMetrics>& m) {
    std::vector<double> out;
    for (const auto& s : m) out.push_back(s.loss);
    return out;
  }

  // The engine driven by `step` for training.steps steps, with what a trainer's step does around
  // it left to `step`: it gets the engine, the 1-based step and a call that runs the step's one
  // forward and backward (the trainer's cross-entropy over a batch of the corpus, then
  // end_micro_batch) and returns the loss.
  using EngineStep = std::function<void(engine::ParamEngine&, int64_t,
                                        const std::function<double()>& forward_backward)>;
  void run_engine_steps(const config::TrainConfig& c, std::unique_ptr<DeviceTier> tier,
                        const EngineStep& step) {
    train::ModelAndEngine built = build(c, std::move(tier));
    const data::TrainingData d =
        data::open_training_data(c, built.model->vocab_size(), built.model->max_seq_len());
    built.model->train();
    for (int64_t s = 1; s <= c.training.steps; ++s) {
      const data::Batch batch = d.train->batch(s, 1);
      step(*built.engine, s, [&] {
        model::ScopedModuleHooks hooks(built.engine->hooks());
        const auto logits = built.model->forward(batch.inputs);
        const auto loss = torch::nn::functional::cross_entropy(
            logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32), batch.targets.reshape({-1}));
        loss.backward();
        built.engine->end_micro_batch();
        return loss.item<double>();
      });
    }
  }

  pstar::testing::ScratchDir dir_;
  std::string corpus_;
};

}  // namespace pstar::tier::testing
