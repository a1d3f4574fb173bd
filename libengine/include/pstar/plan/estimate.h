// `pstar estimate`: whether a model (GPT or Llama family) fits a set of hardware and how fast it
// trains, and the largest GPT or Llama-3-like model that fits, from the engine's own accounting
// (memory_plan.h) plus a step-time model. docs/estimate.md lists every assumption and its source.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pstar/plan/memory_plan.h"
#include "pstar/plan/run_plan.h"

namespace pstar::plan {

// A GPU model's figures (docs/estimate.md gives each source).
struct GpuPreset {
  const char* name;
  int64_t memory;       // bytes
  double tflops_16;     // dense fp16/bf16 tensor-core peak
  double tflops_32;     // dense fp32 peak (TF32 tensor cores where the GPU has them)
  double pcie_gbps;     // achieved host<->device per direction, GB/s
  double link_gbps;     // GPU<->GPU within a node per direction, GB/s
  double cpu_mem_gbps;  // host memory bandwidth of the typical server around it, GB/s
};
const std::vector<GpuPreset>& gpu_presets();
const GpuPreset* find_gpu_preset(const std::string& name);  // case-insensitive; nullptr if none

// NVMe defaults (docs/estimate.md): 6 GB/s read, one fast Gen4/Gen5 SSD or a small array; writes
// at about half the read rate, as DeepNVMe measured (10/5 GB/s on 4 Gen4 SSDs, 48/26 on 8 Gen5;
// ../shared/reference/peers.md).
inline constexpr double kDefaultNvmeReadGbps = 6;
inline constexpr double kNvmeWriteShare = 0.5;

struct Hardware {
  std::string name = "custom";
  int64_t gpu_memory = 0;  // per GPU
  int64_t cpu_memory = 0;  // per node
  int64_t gpus_per_node = 1;
  int64_t nodes = 1;
  double tflops_16 = 0, tflops_32 = 0;
  double pcie_gbps = 0, link_gbps = 0, cpu_mem_gbps = 0;
  double net_gbps = 25;  // between nodes, per node
  double mfu = 0.5;      // share of peak the GPU compute reaches
  // The NVMe tier per node (Note [nvme fit]): 0 bytes, none. Sequential rates, GB/s; read and
  // write share the disk (Note [nvme time]).
  int64_t nvme_capacity = 0;
  double nvme_read_gbps = kDefaultNvmeReadGbps;
  double nvme_write_gbps = kDefaultNvmeReadGbps * kNvmeWriteShare;
  int64_t world() const { return gpus_per_node * nodes; }
};

// What one rank trains per step. seq_len and vocab describe the shapes a search builds (and the
// report); an evaluated model::ModelShape carries its own training length and vocabulary.
struct Workload {
  int64_t seq_len = 1024;
  int64_t micro_batch = 4;
  bool checkpointing = true;
  int64_t elem_bytes = 2;  // 2: fp16/bf16, 4: fp32
  std::string precision = "bf16";
  int64_t chunk_size = int64_t{64} << 20;  // elements
  int64_t vocab = 50257;
  bool use_cpu_embedding = false;
  bool chunk_size_search = false;
  bool gradient_accumulation = false;
};

// What `pstar train` runs for a resolved run (Note [run plan]): the model's shape, the plan's
// micro-batch and precision, and the config's checkpointing and chunk options.
Workload workload_for(const RunPlan& run, const model::ModelShape& shape);

// The FLOPs of training on one token of `shape` at its seq_len (Note [flops per token]): the GPT
// by PatrickStar's count (6·P, 8·P with recomputation), the Llama family counted matrix by matrix.
double train_flops_per_token(const model::ModelShape& shape, bool checkpointing);
// The model FLOPs of one token as model-FLOPs utilisation counts them, recomputation left out:
// the GPT's 6·P + 12·L·h·s (the attention scores besides the matrices; bench/gpu/gpt_bench.sh
// counts the same), the Llama family's matrix-by-matrix count, which has them already.
double model_flops_per_token(const model::ModelShape& shape);

// Note [nvme time]
// Each chunk whose optimizer payloads live on NVMe reads them once and writes them once per step.
// Read and write share the disk, so the node's I/O time is the read bytes at the read rate plus
// the write bytes at the write rate (not the larger of the two). The reads run ahead of host
// Adam and the writes behind it (kNvmeStagingChunks), so the optimizer phase takes the larger of
// host Adam and the I/O, plus a pipeline fill of one chunk: the first chunk's read before its
// Adam can start and the last chunk's write after it ends (every rank of the node at once). Reads
// started during the backward are not credited.
// Note [communication time]
// With several ranks a rank sends (N − 1)/N of the model three times a step: all-gathered for the
// forward and again for the backward in the compute dtype (e bytes), and its gradients
// reduce-scattered in fp32 (Note [ring collectives]): (N − 1)/N · P · (2e + 4) bytes, at NVLink's
// rate within a node and at the per-GPU share of the network across nodes. The chunk engine runs
// the collectives on a thread of their own beside compute (Note [collectives beside compute]), so
// the step pays only what is longer than the forward and backward: comm_exposed_s.
struct StepTime {
  double flops_per_gpu = 0;
  double compute_s = 0, transfer_s = 0, host_adam_s = 0, comm_s = 0;
  // The part of comm_s that compute does not hide (Note [communication time]).
  double comm_exposed_s() const { return comm_s > compute_s ? comm_s - compute_s : 0.0; }
  // Per node and step: the NVMe bytes each way, the I/O time and the pipeline fill.
  int64_t nvme_read_bytes = 0, nvme_write_bytes = 0;
  double nvme_io_s = 0, nvme_fill_s = 0;
  // The optimizer phase on the host: host Adam, overlapped with the NVMe I/O when there is any.
  double optimizer_s() const {
    return nvme_read_bytes > 0 ? std::max(host_adam_s, nvme_io_s) + nvme_fill_s : host_adam_s;
  }
  double step_s() const { return compute_s + transfer_s + optimizer_s() + comm_exposed_s(); }
  double tflops_per_gpu() const { return flops_per_gpu / step_s() / 1e12; }
};

// One model on the hardware: the fit per tier, the activations, the time.
struct Evaluation {
  model::ModelShape shape;
  int64_t params = 0;
  ChunkLayout layout;
  PayloadBytes payload;
  ActivationEstimate activations;
  Fit fit;
  int64_t device_budget = 0, host_budget = 0;  // kDefaultMemoryRatio of each tier
  int64_t staging_per_rank = 0;
  StepTime time;
};

// The chunk layout (the model's own leaf modules, as training lays them out), payloads,
// activations (the family's activation model), fit and step time of `shape`.
Evaluation evaluate(const Hardware& hw, const Workload& w, const model::ModelShape& shape);

// The fit of an explicit device/host budget pair (the engine's emulated tier, or a config's
// engine.device_memory/host_memory), one rank, no staging: what `pstar train` checks.
Evaluation evaluate_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                            const model::ModelShape& shape);

// The GPT of the given width and depth, with the workload's vocabulary and sequence length.
model::ModelShape gpt_shape(const Workload& w, int64_t hidden, int64_t layers, int64_t heads);
inline Evaluation evaluate(const Hardware& hw, const Workload& w, int64_t hidden, int64_t layers,
                           int64_t heads) {
  return evaluate(hw, w, gpt_shape(w, hidden, layers, heads));
}
inline Evaluation evaluate_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                                   int64_t hidden, int64_t layers, int64_t heads) {
  return evaluate_budgets(device_budget, host_budget, w, gpt_shape(w, hidden, layers, heads));
}

// Note [llama3 shape rule]
// A Llama-3-like shape of width `hidden` (a multiple of 1024): head_dim 128, hidden/128 query
// heads, 8 key/value heads, SwiGLU width llama3_intermediate(hidden), untied head, rope_theta
// 500000. Meta's rule, ffn_dim_multiplier 1.3 and multiple_of 1024 as Llama 3.1 8B and 70B use:
// intermediate = 1024·ceil(1.3·(8·hidden/3)/1024) (14336 at 4096, 28672 at 8192).
int64_t llama3_intermediate(int64_t hidden);
model::ModelShape llama3_shape(int64_t hidden, int64_t layers, int64_t vocab, int64_t seq_len);

// Shapes of one width at any depth: the searches vary the layers.
using ShapeAtDepth = std::function<model::ModelShape(int64_t layers)>;

// The most layers that fit (0 if none), up to `limit`: on hardware, or on one rank's explicit
// budgets (the emulated device tier).
int64_t max_layers(const Hardware& hw, const Workload& w, const ShapeAtDepth& shape,
                   int64_t limit = 4096);
int64_t max_layers_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                           const ShapeAtDepth& shape, int64_t limit = 4096);
// The same for GPTs of width `hidden` with `heads` heads.
int64_t max_layers(const Hardware& hw, const Workload& w, int64_t hidden, int64_t heads,
                   int64_t limit = 4096);
int64_t max_layers_budgets(int64_t device_budget, int64_t host_budget, const Workload& w,
                           int64_t hidden, int64_t heads, int64_t limit = 4096);

struct LadderEntry {
  std::string name;
  int64_t params = 0;
  bool fits = false;
};

struct Estimate {
  Evaluation best;  // params 0 when nothing fits
  std::string how;  // "layers searched at hidden H" / "continuous shapes" ...
  std::vector<LadderEntry> ladder;
};

// The largest GPT. With hidden/heads: the most layers. Without: the preset ladder's widths and a
// continuous grid of widths (head size 128), layers free within hidden/160..hidden/32
// (docs/estimate.md). The ladder: the GPT presets.
Estimate estimate_largest(const Hardware& hw, const Workload& w, std::optional<int64_t> hidden,
                          std::optional<int64_t> heads);

// The largest Llama-3-like model (Note [llama3 shape rule]) with the workload's vocabulary and
// sequence length. With `hidden`: the most layers. Without: widths 1024..65536 in steps of 1024,
// layers within hidden/160..hidden/64 (the published Llamas have hidden/layers 100 to 130). The
// ladder: the Llama-family presets at the workload's sequence length.
Estimate estimate_largest_llama(const Hardware& hw, const Workload& w,
                                std::optional<int64_t> hidden);

// DeepSpeed's published estimator formulas (model states only), inverted to the largest P.
struct DeepSpeedEstimate {
  std::string name;
  int64_t max_params = 0;
  std::string gpu_formula, cpu_formula;
};
std::vector<DeepSpeedEstimate> deepspeed_estimates(const Hardware& hw, int64_t hidden,
                                                   int64_t vocab);

}  // namespace pstar::plan
