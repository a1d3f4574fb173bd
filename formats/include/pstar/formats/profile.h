// Profile files (`pstar profile`, `pstar train --profile`): what the chunk engine did, moment by
// moment, in HDF5. The in-memory form below is columns (struct of arrays) so that each column is
// one HDF5 dataset, readable as is by h5py. docs/profile.md describes the file; bump
// kProfileSchemaVersion on any change a reader of the old schema would misread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pstar::formats {

inline constexpr int64_t kProfileSchemaVersion = 1;
// The root attribute `format` of every profile file.
inline constexpr const char kProfileFormat[] = "pstar-profile";

// Stages a moment or a time sample belongs to.
enum class ProfileStage : int8_t { kForward = 0, kBackward = 1, kOptimizer = 2 };
// Where a chunk's compute payload is at a moment (the location matrix). kNvme: on the host, with
// the chunk's optimizer payloads in the NVMe tier (engine.nvme_path).
enum class ChunkPlace : int8_t { kAbsent = 0, kHost = 1, kDevice = 2, kNvme = 3 };
// What happened to a chunk.
enum class ChunkEventKind : int8_t {
  kMoveH2D = 0,     // compute payload host -> device
  kMoveD2H = 1,     // compute payload device -> host
  kAllocate = 2,    // payloads created (start-up, or a gathered copy of another rank's chunk)
  kRelease = 3,     // a gathered copy dropped
  kAdamDevice = 4,  // Adam ran on the device
  kAdamHost = 5,    // Adam ran on the host
  kGather = 6,      // the chunk's group was all-gathered (one event per group, on its first chunk)
  kReduce = 7,      // the chunk's group was reduce-scattered (likewise)
  kNvmeRead = 8,    // optimizer payloads read from NVMe for host Adam (seconds: waited for)
  kNvmeWrite = 9,   // optimizer payloads written back to NVMe behind host Adam
};
const char* to_string(ProfileStage stage);
const char* to_string(ChunkPlace place);
const char* to_string(ChunkEventKind kind);

// Attributes of the file's root group.
struct ProfileRun {
  int64_t schema_version = kProfileSchemaVersion;
  std::string config_json;  // the run's resolved config
  std::string pstar_version, torch_version;
  std::string created;    // ISO 8601, UTC
  std::string precision;  // fp32 | bf16 | fp16
  int64_t chunk_size = 0, num_chunks = 0;
  int64_t compute_bytes_per_chunk = 0, optimizer_bytes_per_chunk = 0;
  int64_t device_budget = 0, host_budget = 0;
  int64_t world_size = 1, rank = 0;
  int64_t warmup_iterations = 0;
  int64_t steps = 0;  // steps recorded (rows of ProfileSteps)
};

// /chunks: one row per chunk.
struct ProfileChunks {
  std::vector<int64_t> id, numel, capacity, group, owner;
  std::vector<int8_t>
      embedding;  // 1: an embedding chunk (engine.use_cpu_embedding keeps it on host)
  std::vector<std::string> payloads;  // e.g. "param+grad,master,exp_avg,exp_avg_sq"
  // The names of the tensors it holds, in order, joined by ',' (e.g.
  // "model.layers.1.mlp.experts.0.gate_proj.weight,..."). Optional (/chunks/tensors was added
  // within schema 1): empty, with no row at all, for a file from a pstar before it; otherwise
  // one entry per row.
  std::vector<std::string> tensors;
  size_t size() const { return id.size(); }
};

// /memory/by_moment: one row per moment of every recorded step; the row index is the moment's
// global index (the location matrix's row). /memory/by_time: the same figures sampled on a clock.
struct ProfileMemory {
  std::vector<int64_t> step;      // by_moment only (empty in by_time)
  std::vector<int64_t> moment;    // index within its step; by_moment only
  std::vector<std::string> name;  // e.g. "forward of transformer.h.0.attn.c_attn.weight"; by_moment
  std::vector<int8_t> stage;      // ProfileStage
  std::vector<double> time_s;     // since the first recorded step began
  std::vector<int64_t> device_total, device_chunks, device_non_model;
  std::vector<int64_t> host_total, host_chunks, host_non_model;
  size_t size() const { return time_s.size(); }
};

// /events
struct ProfileEvents {
  std::vector<double> time_s;
  // moment: the by_moment row the event belongs to: the moment it happened in, or the one it
  // prepared (moves, gathers and releases happen just before a moment's row opens); -1 for none.
  std::vector<int64_t> step, moment;
  std::vector<int64_t> chunk;
  std::vector<int8_t> kind;  // ChunkEventKind
  std::vector<int64_t> bytes;
  std::vector<double> duration_s;
  size_t size() const { return time_s.size(); }
};

// /steps: one row per recorded step.
struct ProfileSteps {
  std::vector<int64_t> step;
  std::vector<double> time_s, forward_s, backward_s, optimizer_s;
  std::vector<double> loss;
  std::vector<int64_t> device_peak_bytes, host_peak_bytes, moved_h2d_bytes, moved_d2h_bytes;
  size_t size() const { return step.size(); }
};

struct Profile {
  // Set by read_profile: the file carried pstar's checksum header and matched it (Note [profile
  // checksum] in formats/src/profile/checksum.h). False for a profile written before checksums (by
  // an older pstar), which is read unchecked. Not stored as such: write_profile always writes it.
  bool checksummed = false;
  ProfileRun run;
  ProfileChunks chunks;
  ProfileMemory by_moment, by_time;
  ProfileEvents events;
  // /location: by_moment.size() rows x chunks.size() columns, row-major, ChunkPlace values.
  std::vector<int8_t> location;
  ProfileSteps steps;
};

// Profile files are HDF5, which a build may leave out (PSTAR_WITH_HDF5, cmake/dependencies.cmake).
// Whether this build reads and writes them; the types and to_string above are in every build.
bool profile_io_built();
// Throws, in a build without HDF5, the ConfigError that says so and how to get a build with it,
// naming `what` (e.g. "pstar profile"); returns in a build with it. Commands call it before any
// work, so that they fail at once rather than when the profile is written.
void require_profile_io(const std::string& what);

// Writes atomically (a temporary file, then rename), with a checksum header in the HDF5 user
// block (the first 512 bytes: pstar's magic, the CRC-32 and size of the file, the pstar version),
// written after libhdf5 has closed the file; HDF5 readers skip it. IoError naming the path when it
// cannot be written; InternalError if the columns' lengths disagree.
void write_profile(const std::string& path, const Profile& profile);

// Checks the checksum header (size and CRC-32) before libhdf5 sees a byte of the file, so that a
// damaged profile is a FormatError rather than whatever libhdf5's parser makes of it (it can crash
// on corrupt files). A file without the header but with the HDF5 signature at its start is a
// profile from before checksums and is read unchecked (Profile::checksummed false). Then IoError
// for a missing/unreadable file; FormatError naming the file and the dataset or attribute for
// anything malformed or missing, and for a schema_version newer than this build's (saying which
// version this pstar reads). In a build without HDF5, both throw require_profile_io's ConfigError.
Profile read_profile(const std::string& path);

// Recomputes the checksum header of a profile changed in place through HDF5 (for example by h5py
// in "r+" mode, or the fuzz target's edits), so that read_profile takes it again. FormatError if
// the file has no pstar checksum header to rewrite; IoError if it cannot be read or written.
void reseal_profile(const std::string& path);

}  // namespace pstar::formats
