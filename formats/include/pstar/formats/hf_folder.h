// A Hugging Face model folder as `save_pretrained` writes it: config.json beside either one
// model.safetensors or several shards named by model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {tensor name: shard file}}).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

}  // namespace pstar::formats
