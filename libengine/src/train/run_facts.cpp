#include "pstar/train/run_facts.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/strings.h"
#include "pstar/core/numa.h"
#include "pstar/dist/communicator.h"
#include "pstar/dist/world.h"
#include "pstar/model/model_shape.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/precision.h"
#include "pstar/train/trainer.h"

namespace pstar::train {

plan::RankDevice rank_device(const config::TrainConfig& config, const std::string& device_option,
                             int64_t local_rank, int64_t local_world_size) {
  plan::RankDeviceFacts facts;
  const bool cuda = compute_device(config, device_option).is_cuda();
  facts.requested = cuda ? plan::DeviceKind::kCuda : plan::DeviceKind::kCpu;
  facts.visible_gpus = static_cast<int64_t>(torch::cuda::device_count());
  facts.local_rank = local_rank;
  facts.local_world_size = local_world_size;
  facts.nccl_missing = dist::nccl_missing_reason();
  return plan::choose_rank_device(config.distributed, facts);
}

NumaReport bind_rank_to_numa(const config::TrainConfig& config, const plan::RankDevice& device,
                             int64_t local_rank, int64_t local_world_size) {
  const std::vector<core::NumaNode> nodes = core::read_numa_nodes("/sys");
  NumaReport report;
  report.notable = nodes.size() > 1;
  if (!config.distributed.numa_bind) {
    report.line = "numa: not bound (distributed.numa_bind is false)";
    return report;
  }
  const bool gpu = device.kind == plan::DeviceKind::kCuda;
  int device_node = -1;
  if (gpu && nodes.size() > 1) {
    try {
      device_node =
          core::read_pci_numa_node("/sys", tier::cuda_pci_bus_id(static_cast<int>(device.index)));
    } catch (const ConfigError&) {
      // A build without the CUDA tier cannot say; the choice below reports the node unknown.
    }
  }
  const core::NumaChoice choice =
      core::choose_numa_node(nodes, gpu, device_node, local_rank, local_world_size);
  if (choice.node == nullptr) {
    report.line = str_cat("numa: not bound (", choice.reason, ")");
    return report;
  }
  const std::string failed = core::bind_to_numa_node(*choice.node);
  const std::vector<int>& cpus = choice.node->cpus;
  report.line = failed.empty() ? str_cat("numa: bound to node ", choice.node->id, " (",
                                         choice.reason, "; ", cpus.size(), " CPUs, ", cpus.front(),
                                         " to ", cpus.back(), ", memory preferred there)")
                               : str_cat("numa: not bound to node ", choice.node->id, " (",
                                         choice.reason, "): ", failed);
  return report;
}

plan::RunFacts gather_run_facts(const config::TrainConfig& config, const std::string& device_option,
                                dist::Communicator* comm) {
  plan::RunFacts facts;
  if (comm != nullptr) {
    facts.world_size = comm->world_size();
    facts.ranks_per_host = comm->world().local_world_size;
  }
  // Note [rank device]: this rank's GPU, before the bf16 probe and the free-memory query use it.
  facts.rank = rank_device(config, device_option, comm != nullptr ? comm->world().local_rank : 0,
                           comm != nullptr ? comm->world().local_world_size : 1);
  facts.device = facts.rank->kind;
  facts.device_name = facts.rank->name();
  const c10::Device device(facts.device_name);
  if (config.bf16.enabled == config::OnOffAuto::kAuto) {
    const Bf16Probe probe = bf16_probe(device);
    facts.bf16_fast = probe.fast();
    facts.bf16_evidence = describe_bf16_verdict(probe);
    if (comm != nullptr) {
      const auto verdicts = comm->exchange("bf16", *facts.bf16_fast ? "1" : "0");
      if ((verdicts[0] == "1") != *facts.bf16_fast) {
        facts.bf16_fast = verdicts[0] == "1";
        facts.bf16_evidence += "; rank 0 decided for every rank";
      }
    }
  } else if (config.bf16.enabled == config::OnOffAuto::kOn) {
    warn_if_bf16_slow(device);
  }
  if (config.engine.mode == config::EngineMode::kChunked && device.is_cuda() &&
      !config.engine.device_memory) {
    facts.free_device_bytes = tier::cuda_free_bytes(device.has_index() ? device.index() : 0);
    // Every rank plans with the least free memory any rank saw: ranks sharing a GPU read it while
    // the others start, and one budget for all keeps the fit check's verdict the same on every
    // rank (a refusal on one rank alone would leave the others waiting in a collective).
    if (comm != nullptr) {
      for (const std::string& seen :
           comm->exchange("free_device_bytes", std::to_string(*facts.free_device_bytes)))
        facts.free_device_bytes = std::min<int64_t>(*facts.free_device_bytes, std::stoll(seen));
    }
  }
  facts.physical_memory_bytes = plan::physical_memory_bytes();
  // Only where the decision's reason needs it (Note [cpu embedding]): a caller's own model may
  // leave model.* to the defaults.
  if (config.engine.mode == config::EngineMode::kChunked && device.is_cuda() &&
      config.use_cpu_embedding == config::OnOffAuto::kAuto) {
    const model::ModelShape shape = model::resolve_model_shape(config.model);
    facts.tied_head = shape.family == model::ModelFamily::kGpt || shape.decoder.tie_word_embeddings;
  }
  return facts;
}

plan::RunPlan plan_run(const config::TrainConfig& config, const std::string& device_option,
                       dist::Communicator* comm) {
  plan::RunPlan plan = plan::resolve_run(config, gather_run_facts(config, device_option, comm));
  // Note [collectives beside compute]: PSTAR_OVERLAP_COMM=0 waits for every collective where it
  // is queued, to compare or to rule the overlap out; read once, here.
  if (const char* overlap = std::getenv("PSTAR_OVERLAP_COMM"))
    plan.overlap_comm = std::string(overlap) != "0";
  plan::check_rank_collectives(plan, dist::nccl_missing_reason());
  return plan;
}

c10::Device plan_device(const plan::RunPlan& plan) { return c10::Device(plan.device_name); }

c10::ScalarType plan_dtype(const plan::RunPlan& plan) { return precision_dtype(plan.precision); }

c10::ScalarType precision_dtype(plan::Precision precision) {
  switch (precision) {
    case plan::Precision::kFp32:
      return torch::kFloat32;
    case plan::Precision::kBf16:
      return torch::kBFloat16;
    case plan::Precision::kFp16:
      return torch::kFloat16;
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown precision ", static_cast<int>(precision));
}

}  // namespace pstar::train
