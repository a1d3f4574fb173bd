// The device communicator: chunk groups and scalars over c10d's ProcessGroupNCCL between the
// ranks' GPUs (Note [device collectives] in pstar/dist/communicator.h). Compiled only against a
// CUDA LibTorch with c10d's NCCL group (libengine/src/dist/sources.cmake); where nvcc is but no
// CUDA LibTorch, it is compiled, never linked, against the installed headers so that it keeps
// compiling on machines without a GPU.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

// LibTorch's CMake config does not pass this on to users, and ProcessGroupNCCL.hpp is empty
// without it.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include "pstar/core/torch_cuda_compat.h"  // first: it must precede every c10/cuda header

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <torch/torch.h>

#include "c10d_shared.h"
#include "pstar/base/error.h"
#include "pstar/base/format.h"
#include "pstar/core/clock.h"
#include "pstar/core/log.h"
#include "pstar/core/torch_compat.h"
#include "pstar/dist/communicator.h"

namespace pstar::dist {
namespace {

using core::Clock;

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, int device, std::chrono::seconds timeout);
  ~NcclCommunicator() override {
#if PSTAR_TORCH_VERSION_AT_LEAST(2, 3)
    // What destroy_process_group does in Python; without it c10d's destructor does the same but
    // first warns, on every rank of every run, that the group was not destroyed.
    if (group_) {
      try {
        group_->shutdown();
      } catch (const std::exception&) {
        // A failed run's group: its error has been reported already.
      }
    }
#endif
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  const WorldInfo& world() const override { return host_->world(); }
  bool on_device() const override { return true; }
  void all_gather(const std::vector<void*>& parts, int64_t bytes) override;
  void reduce_scatter(int64_t numel, const std::function<void(int64_t, float*)>& add_local,
                      float* out) override;
  void reduce_scatter_flat(float* flat, int64_t numel) override;
  void all_reduce_sum(std::vector<double>& values) override;
  using Communicator::all_reduce_sum;
  void barrier() override { host_->barrier(); }
  std::vector<std::string> exchange(const std::string& key, const std::string& mine) override {
    return host_->exchange(key, mine);
  }
  CommStats take_stats() override;

 private:
  [[noreturn]] void fail(const char* what, const std::exception& e) const {
    PSTAR_THROW(DistError, "rank ", rank(), " of ", world_size(), " (cuda:", device_, "): ", what,
                " over NCCL failed: ", c10d_what(e),
                "; another rank has probably stopped (its own log says why), or NCCL could not "
                "reach it (NCCL_DEBUG=INFO shows which transport it tried; NCCL_SOCKET_IFNAME "
                "names the interface between hosts)");
  }
  at::Tensor on_gpu(void* data, int64_t numel, c10::ScalarType type) const {
    return torch::from_blob(data, {numel},
                            torch::TensorOptions().dtype(type).device(torch::kCUDA, device_));
  }
  // Issues one collective (`issue` returns its c10d work), then finishes it: a failure of either
  // is this rank's DistError.
  template <typename Issue>
  void run(const char* what, Issue&& issue) {
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = issue();
    } catch (const std::exception& e) {
      fail(what, e);
    }
    finish(work, what);
  }
  // Orders this thread's current stream after `work`, then blocks this thread until the stream is
  // done: the call returns with its result complete (Note [device collectives]).
  void finish(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
    try {
      work->wait(timeout_);
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).synchronize();
    } catch (const std::exception& e) {
      fail(what, e);
    }
  }

  std::unique_ptr<Communicator> host_;  // Gloo: the store, exchange() and barrier()
  const int device_;
  const std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
  CommStats stats_;
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> host, int device,
                                   std::chrono::seconds timeout)
    : host_(std::move(host)),
      device_(device),
      timeout_(std::chrono::duration_cast<std::chrono::milliseconds>(timeout)) {
  const c10::intrusive_ptr<c10d::Store> store = gloo_store(*host_);
  PSTAR_INTERNAL_ASSERT(store, "connect_nccl needs the communicator connect_gloo made");
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  // A rank that stops answering must end the others with a DistError naming them (issue 36), not
  // hang them nor leave them to c10d's watchdog, which tears the process down with a message of
  // its own. With blocking wait, Work::wait gives up after our timeout and throws; the watchdog's
  // own timeout is set later, so that ours comes first. A value the user set wins.
  ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
  const auto begin = Clock::now();
  try {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout_ + std::max(timeout_ / 2, std::chrono::milliseconds(30000));
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("pstar/nccl", store);
    group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, static_cast<int>(rank()),
                                                         static_cast<int>(world_size()), options);
    // NCCL makes its communicator at the first collective: one here, so that a rank that cannot
    // join fails at start-up with this message rather than in the first step.
    std::vector<double> probe{1.0};
    all_reduce_sum(probe);
    PSTAR_INTERNAL_ASSERT(probe[0] == static_cast<double>(world_size()), "NCCL's first sum is ",
                          probe[0], " over ", world_size(), " ranks");
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    PSTAR_THROW(DistError, "rank ", rank(), " of ", world_size(),
                ": the NCCL group on cuda:", device_, " did not form within ", timeout.count(),
                " s: ", c10d_what(e),
                "; every rank needs a GPU of its own (NCCL refuses two ranks on one GPU: "
                "distributed.share_gpus runs them over gloo), and NCCL_DEBUG=INFO says what it "
                "tried");
  }
  stats_ = CommStats{};
  log::info("collectives: NCCL ", c10d::getNcclVersion(), " between the ", world_size(),
            " ranks' GPUs, joined in ", format_fixed(core::seconds_since(begin), 1), " s");
}

void NcclCommunicator::all_gather(const std::vector<void*>& parts, int64_t bytes) {
  const int64_t n = world_size();
  PSTAR_INTERNAL_ASSERT(static_cast<int64_t>(parts.size()) == n);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  const auto begin = Clock::now();
  // Note [flat collectives]: the engine hands its parts side by side, gathered in place as one
  // buffer, this rank's part read from its own slot. Parts elsewhere (a caller outside the engine)
  // go through a buffer of LibTorch's, copied in and out.
  bool side_by_side = true;
  for (int64_t r = 0; r < n && side_by_side; ++r)
    side_by_side = parts[static_cast<size_t>(r)] == static_cast<char*>(parts[0]) + r * bytes;
  at::Tensor all;
  if (side_by_side) {
    all = on_gpu(parts[0], n * bytes, torch::kUInt8);
  } else {
    all = torch::empty({n * bytes},
                       torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA, device_));
    all.narrow(0, rank() * bytes, bytes)
        .copy_(on_gpu(parts[static_cast<size_t>(rank())], bytes, torch::kUInt8));
  }
  at::Tensor mine = all.narrow(0, rank() * bytes, bytes);
  c10d::AllgatherOptions options;
  options.timeout = timeout_;
  run("all-gather", [&] { return group_->_allgather_base(all, mine, options); });
  if (!side_by_side) {
    for (int64_t r = 0; r < n; ++r) {
      if (r == rank()) continue;
      on_gpu(parts[static_cast<size_t>(r)], bytes, torch::kUInt8)
          .copy_(all.narrow(0, r * bytes, bytes));
    }
    c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).synchronize();
  }
  stats_.bytes_sent += (n - 1) * bytes;
  stats_.seconds += core::seconds_since(begin);
}

void NcclCommunicator::reduce_scatter_flat(float* flat, int64_t numel) {
  const int64_t n = world_size();
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  const auto begin = Clock::now();
  // In place: NCCL's reduce-scatter writes the sum of this rank's part over its own slot of the
  // input (its documented in-place case), so the reduction needs no buffer beyond the flat one.
  at::Tensor all = on_gpu(flat, n * numel, torch::kFloat32);
  at::Tensor mine = all.narrow(0, rank() * numel, numel);
  c10d::ReduceScatterOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  options.timeout = timeout_;
  run("reduce-scatter", [&] { return group_->_reduce_scatter_base(mine, all, options); });
  stats_.bytes_sent += (n - 1) * numel * 4;
  stats_.seconds += core::seconds_since(begin);
}

void NcclCommunicator::reduce_scatter(int64_t numel,
                                      const std::function<void(int64_t, float*)>& add_local,
                                      float* out) {
  // Not the engine's (Note [flat collectives]): the parts are summed into a flat buffer of
  // LibTorch's, reduced, and this rank's sum copied out.
  const int64_t n = world_size();
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  at::Tensor all = torch::zeros(
      {n * numel}, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA, device_));
  for (int64_t j = 0; j < n; ++j) add_local(j, all.data_ptr<float>() + j * numel);
  reduce_scatter_flat(all.data_ptr<float>(), numel);
  on_gpu(out, numel, torch::kFloat32).copy_(all.narrow(0, rank() * numel, numel));
  c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).synchronize();
}

void NcclCommunicator::all_reduce_sum(std::vector<double>& values) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  const auto begin = Clock::now();
  const auto count = static_cast<int64_t>(values.size());
  std::vector<at::Tensor> t{torch::from_blob(values.data(), {count}, torch::kFloat64)
                                .to(torch::Device(torch::kCUDA, device_))};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  options.timeout = timeout_;
  run("all-reduce", [&] { return group_->allreduce(t, options); });
  const at::Tensor sum = t[0].cpu();
  std::copy(sum.data_ptr<double>(), sum.data_ptr<double>() + count, values.begin());
  stats_.bytes_sent += count * static_cast<int64_t>(sizeof(double));
  stats_.seconds += core::seconds_since(begin);
}

CommStats NcclCommunicator::take_stats() { return std::exchange(stats_, CommStats{}); }

}  // namespace

std::unique_ptr<Communicator> connect_nccl(std::unique_ptr<Communicator> host, int device,
                                           std::chrono::seconds timeout) {
  return std::make_unique<NcclCommunicator>(std::move(host), device, timeout);
}

}  // namespace pstar::dist
