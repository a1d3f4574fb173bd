// A Hugging Face model folder as `save_pretrained` writes it: config.json beside either one
// model.safetensors or several shards named by model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {tensor name: shard file}}).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pstar/formats/file_guard.h"
#include "pstar/formats/safetensors.h"

namespace pstar::formats {

inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";

struct HfFolder {
  std::string dir;
  std::string config_path;  // dir/config.json
  std::string config_text;  // its contents
  std::string model_type;   // its "model_type"
  std::string index_path;   // dir/model.safetensors.index.json, or empty for one file
  // Each weights file (path) in name order; one entry for a single model.safetensors.
  std::vector<std::string> shards;
  // From the index: tensor name -> its shard's path. Empty for a single file, whose header says.
  std::map<std::string, std::string> shard_of;
};

// Whether `path` is a directory (so model.init_from means a folder, not a .safetensors file).
bool is_directory(const std::string& path);

// Reads config.json and the index, and checks that every file they name exists. IoError when the
// folder cannot be read; FormatError naming the file for a missing config.json (or one without
// model_type), no weights file, a malformed index, or a shard the index names that is absent.
HfFolder read_hf_folder(const std::string& dir);

// The text of model.safetensors.index.json for `shard_of` (tensor name -> shard file name).
std::string hf_index_json(const std::map<std::string, std::string>& shard_of, uint64_t total_size);

// Hugging Face's default shard limit for save_pretrained (max_shard_size "5GB").
inline constexpr uint64_t kHfDefaultMaxShardBytes = 5'000'000'000ULL;

// Writes a Hugging Face model folder one tensor at a time, for models larger than memory: the
// tensors are split in the order given into shards of at most `max_shard_bytes` of data (a tensor
// larger than that gets a shard of its own), named model-0000i-of-0000N.safetensors with an index,
// or model.safetensors when one shard holds them all. The folder is assembled beside `dir` and
// appears whole on commit(); a writer destroyed before that leaves nothing (Note [atomic folder]).
class HfFolderWriter {
 public:
  using Tensor = SafetensorsStreamWriter::Entry;
  // `dir` must not exist, or be an empty folder (ConfigError naming it otherwise).
  HfFolderWriter(const std::string& dir, const std::string& config_json,
                 std::vector<Tensor> tensors, uint64_t max_shard_bytes = kHfDefaultMaxShardBytes);
  ~HfFolderWriter();
  // Each tensor once, in the order given to the constructor (ConfigError naming it otherwise).
  void write(const std::string& name, const void* bytes, size_t size_bytes);
  // Finishes the last shard, writes the index and publishes the folder.
  void commit();
  size_t num_shards() const { return shard_names_.size(); }

 private:
  void open_shard(size_t shard);

  std::string dir_;
  std::unique_ptr<TempPath> temp_;
  std::vector<Tensor> tensors_;
  std::vector<size_t> shard_of_tensor_;  // per tensor, in order
  std::vector<std::string> shard_names_;
  size_t next_ = 0;  // the next tensor to write
  std::unique_ptr<SafetensorsStreamWriter> shard_;
  size_t open_shard_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace pstar::formats
