// Who this process is in a data-parallel run, read from the environment a launcher leaves:
// `pstar train --nproc N` and torchrun set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT; Slurm's srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
// SLURM_JOB_NODELIST (whose first host is the master). docs/distributed.md lists the precedence.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace pstar::dist {

struct WorldInfo {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  int64_t local_world_size = 1;  // ranks on this host: they share engine.host_memory
  std::string master_addr = "127.0.0.1";
  int port = 29500;
  std::string launcher = "none";  // none | pstar | torchrun | slurm

  bool distributed() const { return world_size > 1; }
};

// Reads one environment variable; nullopt when unset.
using EnvReader = std::function<std::optional<std::string>(const std::string& name)>;
std::optional<std::string> process_env(const std::string& name);

// The world this process belongs to. ConfigError naming the variable when a value is malformed
// or inconsistent (a rank outside [0, WORLD_SIZE), a port outside 1..65535).
WorldInfo detect_world(const EnvReader& env = process_env);

// The first host of a Slurm node list in its compressed form: "gpu[03-05,9],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace pstar::dist
