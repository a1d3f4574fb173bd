#include "pstar/formats/hf_folder.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pstar/base/error.h"
#include "pstar/formats/mapped_file.h"

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

// Note [atomic folder]
// The shards, config.json and the index are written into a hidden temporary folder beside `dir`
// and renamed to `dir` only when all are complete (TempPath), so a merge that fails or is killed
// half-way leaves no folder that a later `model.init_from` would load as if it were whole.
HfFolderWriter::HfFolderWriter(const std::string& dir, const std::string& config_json,
                               std::vector<Tensor> tensors, uint64_t max_shard_bytes)
    : dir_(dir), tensors_(std::move(tensors)) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir_, ec)) {
    PSTAR_CHECK(fs::is_directory(dir_, ec) && fs::is_empty(dir_, ec), ConfigError, dir_,
                " already exists and is not an empty folder; name a new folder for the model");
    fs::remove(dir_, ec);  // empty: TempPath renames over a path that must not exist
  }
  PSTAR_CHECK(!tensors_.empty(), ConfigError, dir_, ": no tensors to write");
  PSTAR_CHECK(max_shard_bytes > 0, ConfigError, "the shard size limit must be positive");
  uint64_t in_shard = 0;
  size_t shards = 1;
  for (const Tensor& t : tensors_) {
    uint64_t bytes = dtype_size(t.dtype);
    for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      ++shards;
      in_shard = 0;
    }
    in_shard += bytes;
    total_bytes_ += bytes;
    shard_of_tensor_.push_back(shards - 1);
  }
  for (size_t i = 0; i < shards; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards);
    shard_names_.push_back(shards == 1 ? kHfWeightsFile : name);
  }
  temp_ = std::make_unique<TempPath>(dir_);
  PSTAR_CHECK(fs::create_directory(temp_->path(), ec) && !ec, IoError, "cannot create ",
              temp_->path(), " (for ", dir_, "): ", ec.message());
  write_file_atomic(temp_->path() + "/" + kHfConfigFile, config_json.data(), config_json.size());
}

HfFolderWriter::~HfFolderWriter() = default;

void HfFolderWriter::open_shard(size_t shard) {
  std::vector<Tensor> entries;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (shard_of_tensor_[i] == shard) entries.push_back(tensors_[i]);
  shard_ = std::make_unique<SafetensorsStreamWriter>(
      temp_->path() + "/" + shard_names_[shard], entries,
      std::map<std::string, std::string>{{"format", "pt"}});
  open_shard_ = shard;
}

void HfFolderWriter::write(const std::string& name, const void* bytes, size_t size_bytes) {
  PSTAR_CHECK(next_ < tensors_.size() && tensors_[next_].name == name, ConfigError, dir_,
              ": tensor \"", name, "\" written out of order; expected \"",
              next_ < tensors_.size() ? tensors_[next_].name : std::string("none (all written)"),
              "\"");
  const size_t shard = shard_of_tensor_[next_];
  if (shard_ == nullptr || open_shard_ != shard) {
    if (shard_ != nullptr) shard_->commit();
    open_shard(shard);
  }
  shard_->write(name, bytes, size_bytes);
  ++next_;
}

void HfFolderWriter::commit() {
  PSTAR_CHECK(next_ == tensors_.size(), ConfigError, dir_, ": tensor \"",
              next_ < tensors_.size() ? tensors_[next_].name : std::string(),
              "\" was never written");
  shard_->commit();
  shard_.reset();
  if (shard_names_.size() > 1) {
    std::map<std::string, std::string> shard_of;
    for (size_t i = 0; i < tensors_.size(); ++i)
      shard_of[tensors_[i].name] = shard_names_[shard_of_tensor_[i]];
    const std::string index = hf_index_json(shard_of, total_bytes_);
    write_file_atomic(temp_->path() + "/" + kHfIndexFile, index.data(), index.size());
  }
  temp_->publish("model folder");
}

}  // namespace pstar::formats
