#include "pstar/train/run_facts.h"

#include <torch/torch.h>

#include "pstar/dist/communicator.h"
#include "pstar/dist/world.h"
#include "pstar/model/model_shape.h"
#include "pstar/tier/device_tier.h"
#include "pstar/train/precision.h"
#include "pstar/train/trainer.h"

namespace pstar::train {

plan::RunFacts gather_run_facts(const config::TrainConfig& config, const std::string& device_option,
                                dist::Communicator* comm) {
  plan::RunFacts facts;
  if (comm != nullptr) {
    facts.world_size = comm->world_size();
    facts.ranks_per_host = comm->world().local_world_size;
  }
  // Note [rank device]: this rank's GPU, before the bf16 probe and the free-memory query use it.
  plan::RankDeviceFacts rank_facts;
  const bool cuda = compute_device(config, device_option).is_cuda();
  rank_facts.requested = cuda ? plan::DeviceKind::kCuda : plan::DeviceKind::kCpu;
  rank_facts.visible_gpus = static_cast<int64_t>(torch::cuda::device_count());
  if (comm != nullptr) {
    rank_facts.local_rank = comm->world().local_rank;
    rank_facts.local_world_size = comm->world().local_world_size;
  }
  rank_facts.nccl_missing = dist::nccl_missing_reason();
  facts.rank = plan::choose_rank_device(config.distributed, rank_facts);
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
      !config.engine.device_memory)
    facts.free_device_bytes = tier::cuda_free_bytes(device.has_index() ? device.index() : 0);
  facts.physical_memory_bytes = plan::physical_memory_bytes();
  // Only where the decision's reason needs it (Note [cpu embedding]): a caller's own model may
  // leave model.* to the defaults.
  if (config.engine.mode == config::EngineMode::kChunked && device.is_cuda() &&
      config.use_cpu_embedding == config::OnOffAuto::kAuto) {
    const model::ModelShape shape = model::resolve_model_shape(config.model);
    facts.tied_head = shape.family == model::ModelFamily::kGpt || shape.llama.tie_word_embeddings;
  }
  return facts;
}

plan::RunPlan plan_run(const config::TrainConfig& config, const std::string& device_option,
                       dist::Communicator* comm) {
  plan::RunPlan plan = plan::resolve_run(config, gather_run_facts(config, device_option, comm));
  plan::check_rank_collectives(plan);
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
