#include "pstar/plan/rank_device.h"

#include "pstar/base/error.h"
#include "pstar/plan/run_plan.h"

namespace pstar::plan {

const char* comm_backend_name(CommBackend backend) {
  switch (backend) {
    case CommBackend::kGloo:
      return "gloo";
    case CommBackend::kNccl:
      return "nccl";
  }
  return "?";
}

CommBackend default_backend(DeviceKind device) {
  switch (device) {
    case DeviceKind::kCpu:
      return CommBackend::kGloo;
    case DeviceKind::kCuda:
      return CommBackend::kNccl;
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown device kind ", static_cast<int>(device));
}

std::string RankDevice::name() const {
  return kind == DeviceKind::kCuda ? str_cat("cuda:", index) : std::string("cpu");
}

std::string RankDevice::describe() const {
  return str_cat("device: ", name(), why.empty() ? "" : str_cat(" (", why, ")"),
                 ", collectives over ", comm_backend_name(backend));
}

namespace {

// The GPU of local rank `r` (Note [rank device]): its own, or with distributed.share_gpus one of
// the visible ones in turn.
RankDevice choose_gpu(const config::DistributedConfig& distributed, const RankDeviceFacts& f) {
  RankDevice d;
  d.kind = DeviceKind::kCuda;
  PSTAR_CHECK(f.visible_gpus > 0, ConfigError,
              "--device cuda: this process sees no GPU (CUDA_VISIBLE_DEVICES may hide them); "
              "make one visible or use --device cpu");
  const std::string ranks =
      str_cat(f.local_world_size, " rank", f.local_world_size == 1 ? "" : "s");
  const std::string gpus = str_cat(f.visible_gpus, " GPU", f.visible_gpus == 1 ? "" : "s");
  if (f.local_world_size <= f.visible_gpus) {
    d.index = f.local_rank;
    d.why =
        str_cat("local rank ", f.local_rank, " of ", f.local_world_size, ", ", gpus, " visible");
    return d;
  }
  PSTAR_CHECK(
      distributed.share_gpus, ConfigError, "this node runs ", ranks,
      " (LOCAL_WORLD_SIZE) but this process sees ", gpus,
      ", and each rank computes on a GPU of its own (local rank r on cuda:r); start at most ",
      f.visible_gpus, " rank(s) per node (--nproc ", f.visible_gpus,
      "), make more GPUs visible (CUDA_VISIBLE_DEVICES), set distributed.share_gpus true to "
      "let the ranks share them over Gloo (for testing, not speed), or use --device cpu");
  d.index = f.local_rank % f.visible_gpus;
  d.shares_gpu = true;
  // Local ranks index, index + visible, ... take this GPU.
  d.gpu_ranks = (f.local_world_size - d.index + f.visible_gpus - 1) / f.visible_gpus;
  d.why = str_cat("local rank ", f.local_rank, " of ", f.local_world_size, " sharing ", gpus,
                  " (distributed.share_gpus)");
  return d;
}

}  // namespace

RankDevice choose_rank_device(const config::DistributedConfig& distributed,
                              const RankDeviceFacts& facts) {
  PSTAR_INTERNAL_ASSERT(facts.local_world_size >= 1 && facts.local_rank >= 0 &&
                            facts.local_rank < facts.local_world_size,
                        "local rank ", facts.local_rank, " of ", facts.local_world_size);
  RankDevice d;
  if (facts.requested == DeviceKind::kCuda) {
    d = choose_gpu(distributed, facts);
  }

  switch (distributed.backend) {
    case config::DistBackend::kAuto:
      // Ranks that share a GPU cannot use NCCL (it refuses two ranks on one GPU).
      d.backend = d.shares_gpu ? CommBackend::kGloo : default_backend(d.kind);
      break;
    case config::DistBackend::kGloo:
      d.backend = CommBackend::kGloo;
      break;
    case config::DistBackend::kNccl:
      PSTAR_CHECK(d.kind == DeviceKind::kCuda, ConfigError,
                  "distributed.backend \"nccl\": NCCL joins GPUs, and this run computes on the "
                  "CPU; set distributed.backend \"gloo\" or \"auto\" (gloo on the CPU), or train "
                  "with --device cuda");
      PSTAR_CHECK(!d.shares_gpu, ConfigError,
                  "distributed.backend \"nccl\": ", facts.local_world_size,
                  " ranks on this node share ", facts.visible_gpus,
                  " GPU(s) (distributed.share_gpus), and NCCL refuses two ranks on one GPU "
                  "(\"Duplicate GPU detected\"); set distributed.backend \"gloo\" or \"auto\" "
                  "(gloo for shared GPUs)");
      PSTAR_CHECK(facts.nccl_missing.empty(), ConfigError,
                  "distributed.backend \"nccl\": this build of pstar has no NCCL communicator (",
                  facts.nccl_missing, "); set distributed.backend \"gloo\" or \"auto\"");
      d.backend = CommBackend::kNccl;
      break;
  }
  return d;
}

void check_rank_collectives(const RunPlan& plan, const std::string& nccl_missing) {
  const bool gpu_ranks = plan.chunked && plan.world_size > 1 && plan.device == DeviceKind::kCuda;
  PSTAR_CHECK(!(gpu_ranks && plan.rank.backend == CommBackend::kNccl && !nccl_missing.empty()),
              ConfigError, "training ", plan.world_size, " ranks on GPUs (this one on ",
              plan.rank.name(), ") over nccl (distributed.backend \"",
              config::dist_backend_name(plan.config.distributed.backend),
              "\"), but this build of pstar has no NCCL communicator (", nccl_missing,
              "); set distributed.backend \"gloo\" to gather and reduce the GPU payloads "
              "through host memory (correct, slower), train on one GPU (--nproc 1), or on "
              "several ranks with --device cpu");
}

}  // namespace pstar::plan
