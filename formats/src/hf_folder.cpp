#include "pstar/formats/hf_folder.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"

namespace pstar::formats {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  PSTAR_CHECK(in.good(), IoError, "cannot read ", path, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  PSTAR_CHECK(!in.bad(), IoError, "cannot read ", path, ": ", std::strerror(errno));
  return text.str();
}

nlohmann::json parse_json(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    PSTAR_THROW(FormatError, path, ": not valid JSON (", e.what(), ")");
  }
}

}  // namespace

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

HfFolder read_hf_folder(const std::string& dir) {
  PSTAR_CHECK(is_directory(dir), IoError, dir, ": not a readable directory");
  HfFolder f;
  f.dir = dir;
  f.config_path = dir + "/" + kHfConfigFile;
  PSTAR_CHECK(exists(f.config_path), FormatError, dir, ": no ", kHfConfigFile,
              "; a Hugging Face model folder has config.json beside model.safetensors (or its "
              "shards and model.safetensors.index.json)");
  f.config_text = read_text(f.config_path);
  const nlohmann::json config = parse_json(f.config_text, f.config_path);
  PSTAR_CHECK(
      config.is_object() && config.contains("model_type") && config.at("model_type").is_string(),
      FormatError, f.config_path, ": no \"model_type\" string; Hugging Face writes one");
  f.model_type = config.at("model_type").get<std::string>();

  const std::string single = dir + "/" + kHfWeightsFile;
  const std::string index = dir + "/" + kHfIndexFile;
  if (exists(index)) {
    f.index_path = index;
    const nlohmann::json j = parse_json(read_text(index), index);
    PSTAR_CHECK(j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object(),
                FormatError, index, ": no \"weight_map\" object (tensor name -> shard file)");
    std::set<std::string> shards;
    for (const auto& [name, file] : j.at("weight_map").items()) {
      PSTAR_CHECK(file.is_string(), FormatError, index, ": weight_map[\"", name,
                  "\"] must be a file name, found ", file.dump());
      const std::string shard = file.get<std::string>();
      PSTAR_CHECK(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(),
                  FormatError, index, ": weight_map[\"", name, "\"] names \"", shard,
                  "\"; shards are file names inside the folder");
      const std::string path = dir + "/" + shard;
      if (shards.insert(path).second)
        PSTAR_CHECK(exists(path), FormatError, index, " names shard ", shard, " (for tensor \"",
                    name, "\"), which is not in ", dir);
      f.shard_of[name] = path;
    }
    PSTAR_CHECK(!shards.empty(), FormatError, index, ": the weight_map is empty");
    f.shards.assign(shards.begin(), shards.end());
  } else {
    PSTAR_CHECK(exists(single), FormatError, dir, ": neither ", kHfWeightsFile, " nor ",
                kHfIndexFile, "; a Hugging Face model folder holds its weights in one of them");
    f.shards = {single};
  }
  return f;
}

std::string hf_index_json(const std::map<std::string, std::string>& shard_of, uint64_t total_size) {
  nlohmann::json j;
  j["metadata"] = {{"total_size", total_size}};
  j["weight_map"] = nlohmann::json::object();
  for (const auto& [name, shard] : shard_of) j["weight_map"][name] = shard;
  return j.dump(2) + "\n";
}

}  // namespace pstar::formats
