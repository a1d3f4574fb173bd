#include "pstar/checkpoint/store.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>

#include <zlib.h>

#include <nlohmann/json.hpp>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "pstar/base/version.h"
#include "pstar/checkpoint/schema.h"
#include "pstar/core/log.h"
#include "pstar/formats/mapped_file.h"

namespace pstar::checkpoint {

namespace fs = std::filesystem;

namespace {

// zlib's crc32 takes a uInt length: feed it in pieces below that.
uint32_t crc32_update(uint32_t crc, const char* data, size_t size) {
  uLong c = crc;
  while (size > 0) {
    const auto n = static_cast<uInt>(std::min<size_t>(size, size_t{1} << 30));
    c = ::crc32(c, reinterpret_cast<const Bytef*>(data), n);
    data += n;
    size -= n;
  }
  return static_cast<uint32_t>(c);
}

// The size and CRC-32 of a file on disk, read in pieces; nullopt-like bytes = -1 if unreadable.
FileDigest digest_of_file(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = str_cat(path, ": cannot open (", std::strerror(errno), ")");
    return {};
  }
  std::vector<char> buf(size_t{8} << 20);
  FileDigest d;
  d.bytes = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<size_t>(in.gcount());
    d.crc32 = crc32_update(d.crc32, buf.data(), n);
    d.bytes += static_cast<int64_t>(n);
  }
  if (in.bad()) {
    *error = str_cat(path, ": read error after ", d.bytes, " bytes");
    return {};
  }
  return d;
}

}  // namespace

std::string crc32_text(uint32_t crc) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", crc);
  return text;
}

namespace {

bool is_step_dir_name(const std::string& name, int64_t* step) {
  static const std::regex pattern("step-([0-9]{1,18})");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return false;
  *step = std::stoll(m[1].str());
  return true;
}

}  // namespace

FileDigest file_digest(const std::string& path) {
  std::string error;
  FileDigest d = digest_of_file(path, &error);
  PSTAR_CHECK(error.empty(), IoError, error);
  return d;
}

std::string FileDigest::to_text() const { return str_cat(bytes, " ", crc32); }

FileDigest FileDigest::from_text(const std::string& text) {
  FileDigest d;
  unsigned long long crc = 0;
  long long bytes = -1;
  if (std::sscanf(text.c_str(), "%lld %llu", &bytes, &crc) == 2) {
    d.bytes = bytes;
    d.crc32 = static_cast<uint32_t>(crc);
  }
  return d;
}

namespace {

// A tensor with a storage of its own, exactly its bytes: LibTorch's archive writer writes whole
// storages, so a view would drag the rest of its storage into the file.
at::Tensor compact(const at::Tensor& t) {
  at::Tensor c = t.detach().cpu().contiguous();
  if (c.storage_offset() != 0 || c.storage().nbytes() != c.nbytes()) c = c.clone();
  return c;
}

}  // namespace

// Note [checkpoint pickle]
// The file is what torch.save writes (a zip archive of data.pkl and one record per storage), with
// a plain dict at the top of the pickle. LibTorch's pickler would by default wrap every dict in
// torch.jit._pickle.restore_type_tag, a global that the weights-only unpickler of Python's
// torch.load refuses (the default from PyTorch 2.6 on: "Unsupported global"); without type tags
// the pickle uses only what that unpickler allows (_rebuild_tensor_v2, the storage types,
// OrderedDict) and LibTorch's own unpickler still reads it as a dict of str -> Tensor.
// LibTorch's archive writer streams each storage straight into the file, so the file is never
// in memory whole, and the CRC-32 is computed on the way.
FileDigest write_checkpoint_file(const std::string& path, const TensorList& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) dict.insert(name, compact(tensor));
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&](const char* bytes, size_t size) { pickle.insert(pickle.end(), bytes, bytes + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(dict);
  pickler.stop();

  formats::AtomicFileWriter file(path);
  FileDigest digest;
  digest.bytes = 0;
  // The archive writer calls back from C code: an exception must not cross it. Nor may the writer
  // throw once it has failed: its destructor finishes the archive, through this callback, and a
  // throw there (while an error unwinds the stack) would end the process. So the first failed
  // write (a full disk) is kept, and from then on the callback takes whatever comes without
  // writing it; the error is rethrown once the writer is gone, and the temporary file is removed.
  std::exception_ptr write_error;
  bool abandoned = false;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t size) -> size_t {
      if (abandoned) return size;
      try {
        file.append(bytes, size);
        digest.crc32 = crc32_update(digest.crc32, static_cast<const char*>(bytes), size);
        digest.bytes += static_cast<int64_t>(size);
      } catch (...) {
        write_error = std::current_exception();
        abandoned = true;
      }
      return size;
    });
    try {
      torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(),
                                         writer);
      writer.writeEndOfFile();
    } catch (const c10::Error& e) {
      abandoned = true;
      if (write_error) std::rethrow_exception(write_error);
      PSTAR_THROW(IoError, "cannot write '", path, "': ", e.what_without_backtrace());
    }
  }
  if (write_error) std::rethrow_exception(write_error);
  PSTAR_INTERNAL_ASSERT(digest.bytes == static_cast<int64_t>(file.size_bytes()), "wrote ",
                        file.size_bytes(), " bytes to ", path, " but digested ", digest.bytes);
  file.commit();
  return digest;
}

TensorMap read_checkpoint_file(const std::string& path) {
  PSTAR_CHECK(fs::is_regular_file(path) && std::ifstream(path).good(), IoError,
              "cannot read checkpoint ", path);
  c10::IValue value;
  // LibTorch 1.13's unpickler sizes each storage from the numel its pickle claims, not from the
  // record holding its bytes, and does not compare a tensor's shape and offset with its storage:
  // a corrupt pickle gives tensors that reach outside their buffers (found by
  // tests/fuzz/checkpoint_fuzz; docs/fuzzing.md). So the records are read here
  // (readArchiveAndTensors("data", ...) spelled out) to know their sizes, and every tensor is
  // checked against them below.
  std::map<const void*, size_t> record_bytes;
  try {
    // torch::pickle_load would need the whole file in memory besides the tensors it holds; the
    // archive reader reads each tensor's record straight into its storage.
    caffe2::serialize::PyTorchStreamReader reader(path);
    at::DataPtr pickle;
    size_t pickle_bytes = 0, pickle_read = 0;
    std::tie(pickle, pickle_bytes) = reader.getRecord("data.pkl");
    torch::jit::Unpickler unpickler(
        [&](char* buffer, size_t n) {
          n = std::min(n, pickle_bytes - pickle_read);
          if (n > 0) std::memcpy(buffer, static_cast<const char*>(pickle.get()) + pickle_read, n);
          pickle_read += n;
          return n;
        },
        nullptr, nullptr,
        [&](const std::string& name) {
          auto [data, size] = reader.getRecord("data/" + name);
          record_bytes[data.get()] = size;
          return std::move(data);
        },
        c10::nullopt);
    unpickler.set_version(reader.version());
    value = unpickler.parse_ivalue();
  } catch (const c10::Error& e) {
    PSTAR_THROW(FormatError, path,
                ": not a readable checkpoint (truncated or corrupt: ", e.what_without_backtrace(),
                ")");
  } catch (const std::exception& e) {
    PSTAR_THROW(FormatError, path, ": not a readable checkpoint (truncated or corrupt: ", e.what(),
                ")");
  }
  PSTAR_CHECK(value.isGenericDict(), FormatError, path, ": expected a dict of tensors, found ",
              value.tagKind());
  TensorMap out;
  for (const auto& item : value.toGenericDict()) {
    PSTAR_CHECK(item.key().isString() && item.value().isTensor(), FormatError, path,
                ": expected a dict of name -> tensor; found an entry of ", item.key().tagKind(),
                " -> ", item.value().tagKind());
    const at::Tensor& t = item.value().toTensor();
    const std::string& name = item.key().toStringRef();
    const auto record = record_bytes.find(t.storage().data());
    const size_t have = record == record_bytes.end() ? 0 : record->second;
    PSTAR_CHECK(t.storage().nbytes() <= have, FormatError, path, ": tensor '", name, "' has a ",
                t.storage().nbytes(), "-byte storage, but its record holds ", have,
                " bytes; the checkpoint is truncated or corrupt");
    // Every element must lie inside the storage: offset + sum((size - 1) * stride) < its
    // capacity, checked term by term so that no product can overflow.
    const int64_t capacity = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
    int64_t last = t.storage_offset();
    bool inside = t.numel() == 0 || (last >= 0 && last < capacity);
    for (int64_t d = 0; inside && t.numel() > 0 && d < t.dim(); ++d) {
      PSTAR_CHECK(t.stride(d) >= 0, FormatError, path, ": tensor '", name, "' has strides ",
                  t.strides(), "; a checkpoint's strides are never negative (corrupt file)");
      const int64_t steps = t.size(d) - 1;
      inside = t.stride(d) == 0 || steps <= (capacity - 1 - last) / t.stride(d);
      if (inside) last += steps * t.stride(d);
    }
    PSTAR_CHECK(inside, FormatError, path, ": tensor '", name, "' (shape ", t.sizes(), ", strides ",
                t.strides(), ", offset ", t.storage_offset(), ") reaches outside its ",
                t.storage().nbytes(), "-byte storage; the checkpoint is corrupt");
    out.emplace(name, t);
  }
  return out;
}

const at::Tensor& checkpoint_tensor(const TensorMap& tensors, const std::string& name,
                                    const std::string& file, c10::IntArrayRef shape,
                                    c10::ScalarType dtype) {
  auto it = tensors.find(name);
  PSTAR_CHECK(it != tensors.end(), FormatError, file, ": tensor '", name,
              "' is missing; was this checkpoint written for another model?");
  const at::Tensor& t = it->second;
  PSTAR_CHECK(t.sizes() == shape, FormatError, file, ": tensor '", name, "' has shape ", t.sizes(),
              " but this run needs ", shape,
              "; the checkpoint was written for another model shape");
  PSTAR_CHECK(t.scalar_type() == dtype, FormatError, file, ": tensor '", name, "' has dtype ",
              t.scalar_type(), " but this run needs ", dtype);
  return t;
}

int64_t adam_missed(const TensorMap& tensors, const std::string& name, int64_t adam_steps,
                    const std::string& file) {
  const std::string key = adam_missed_of(name);
  if (tensors.find(key) == tensors.end()) return 0;
  const int64_t missed = checkpoint_tensor(tensors, key, file, {}, at::kLong).item<int64_t>();
  PSTAR_CHECK(missed >= 0 && missed <= adam_steps, FormatError, file, ": tensor '", key,
              "' says the parameter missed ", missed, " of ", adam_steps,
              " Adam updates; it must be between 0 and ", adam_steps);
  return missed;
}

std::string checkpoint_dir(const std::string& save_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return (fs::path(save_dir) / name).string();
}

void write_latest(const std::string& save_dir, const std::string& dir) {
  const std::string text = fs::path(dir).filename().string() + "\n";
  formats::write_file_atomic((fs::path(save_dir) / "latest").string(), text.data(), text.size());
}

std::string checkpoint_file(const std::string& dir, int64_t rank) {
  return (fs::path(dir) / ("ckpt-" + std::to_string(rank) + ".pt")).string();
}

void write_manifest(const std::string& dir, const CheckpointManifest& manifest) {
  nlohmann::json j = {{"format_version", kFormatVersion},
                      {"world_size", manifest.world_size},
                      {"step", manifest.step},
                      {"run_id", manifest.run_id},
                      {"pstar_version", version()}};
  std::vector<std::string> files;
  for (int64_t r = 0; r < manifest.world_size; ++r)
    files.push_back(fs::path(checkpoint_file(dir, r)).filename().string());
  j["files"] = files;
  if (!manifest.digests.empty()) {
    PSTAR_INTERNAL_ASSERT(static_cast<int64_t>(manifest.digests.size()) == manifest.world_size,
                          "manifest of ", dir, ": ", manifest.digests.size(), " digests for ",
                          manifest.world_size, " ranks");
    nlohmann::json bytes = nlohmann::json::array(), crcs = nlohmann::json::array();
    for (const FileDigest& d : manifest.digests) {
      bytes.push_back(d.bytes);
      crcs.push_back(d.crc32);
    }
    j["bytes"] = bytes;
    j["crc32"] = crcs;
  }
  const std::string text = j.dump(2) + "\n";
  formats::write_file_atomic((fs::path(dir) / "manifest.json").string(), text.data(), text.size());
}

CheckpointManifest read_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / "manifest.json";
  CheckpointManifest manifest;
  if (!fs::exists(path)) return manifest;
  std::ifstream in(path);
  nlohmann::json j;
  // nlohmann converts a float to an integer with a plain cast, which is undefined behaviour when
  // it does not fit (found by tests/fuzz/checkpoint_fuzz): every number is checked to be an
  // integer in range first.
  const auto integer = [&](const nlohmann::json& v, const char* key, int64_t lo, int64_t hi) {
    PSTAR_CHECK(v.is_number_integer() &&
                    (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                            : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi),
                FormatError, path.string(), ": ", key, " must be an integer in [", lo, ", ", hi,
                "], found ", v.dump());
    return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
  };
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  try {
    in >> j;
    manifest.world_size = integer(j.at("world_size"), "world_size", 1, kMax);
    manifest.step = integer(j.at("step"), "step", -1, kMax);
    manifest.run_id = j.at("run_id").get<std::string>();
    if (j.contains("bytes") || j.contains("crc32")) {
      const nlohmann::json& bytes = j.at("bytes");
      const nlohmann::json& crcs = j.at("crc32");
      PSTAR_CHECK(bytes.is_array() && crcs.is_array() &&
                      static_cast<int64_t>(bytes.size()) == manifest.world_size &&
                      crcs.size() == bytes.size(),
                  FormatError, path.string(), ": bytes and crc32 need one entry per rank (",
                  manifest.world_size, ")");
      for (size_t r = 0; r < bytes.size(); ++r) {
        manifest.digests.push_back(
            FileDigest{integer(bytes[r], "bytes", 0, kMax),
                       static_cast<uint32_t>(integer(crcs[r], "crc32", 0, 0xFFFFFFFFLL))});
      }
    }
  } catch (const nlohmann::json::exception& e) {
    PSTAR_THROW(FormatError, path.string(), ": not a valid checkpoint manifest (", e.what(),
                "); it needs world_size, step and run_id");
  }
  PSTAR_CHECK(manifest.world_size >= 1, FormatError, path.string(), ": world_size ",
              manifest.world_size, " must be at least 1");
  return manifest;
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& save_dir) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (fs::directory_iterator it(save_dir, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step = 0;
    if (it->is_directory(ec) && is_step_dir_name(it->path().filename().string(), &step))
      out.push_back(CheckpointEntry{step, it->path().string()});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

std::string checkpoint_file_problem(const std::string& dir, const CheckpointManifest& manifest,
                                    int64_t rank) {
  const std::string file = checkpoint_file(dir, rank);
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return str_cat(file, " is missing");
  if (manifest.digests.empty()) return {};  // written before checksums: nothing to compare
  const FileDigest& want = manifest.digests.at(static_cast<size_t>(rank));
  const auto size = static_cast<int64_t>(fs::file_size(file, ec));
  if (ec) return str_cat(file, ": ", ec.message());
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  if (size != want.bytes)
    return str_cat(file, " has ", size, " bytes but ", manifest_path, " records ", want.bytes,
                   " (truncated, or not the file this checkpoint wrote)");
  std::string error;
  const FileDigest got = digest_of_file(file, &error);
  if (!error.empty()) return error;
  if (got.crc32 != want.crc32)
    return str_cat(file, ": CRC-32 is ", crc32_text(got.crc32), " but ", manifest_path, " records ",
                   crc32_text(want.crc32),
                   " (the file is corrupt, or not the one this checkpoint wrote)");
  return {};
}

std::string checkpoint_problem(const std::string& dir) {
  const fs::path manifest_path = fs::path(dir) / "manifest.json";
  std::error_code ec;
  // The manifest is written last: without it the save did not finish.
  if (!fs::is_regular_file(manifest_path, ec))
    return str_cat(manifest_path.string(), " is missing (the save did not finish)");
  CheckpointManifest manifest;
  try {
    manifest = read_manifest(dir);
  } catch (const Error& e) {
    return e.what();
  }
  for (int64_t r = 0; r < manifest.world_size; ++r) {
    std::string problem = checkpoint_file_problem(dir, manifest, r);
    if (!problem.empty()) return problem;
  }
  return {};
}

std::string newest_intact_checkpoint(const std::string& save_dir, int64_t before) {
  const auto entries = list_checkpoints(save_dir);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (it->step < before && checkpoint_problem(it->dir).empty()) return it->dir;
  return {};
}

std::vector<std::string> prune_checkpoints(const std::string& save_dir, int64_t current,
                                           int64_t keep_last) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  const auto entries = list_checkpoints(save_dir);
  int64_t kept = 0;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->step > current) continue;
    std::error_code ec;
    // Complete means finished (the manifest is written last); the files are not re-read here,
    // which would cost a pass over every checkpoint at every save.
    const bool complete = fs::is_regular_file(fs::path(it->dir) / "manifest.json", ec);
    if (complete && kept < keep_last) {
      ++kept;
      continue;
    }
    if (it->step == current) continue;  // never the one just written
    fs::remove_all(it->dir, ec);
    if (ec) {
      log::warn("training.keep_last: cannot delete old checkpoint ", it->dir, ": ", ec.message());
      continue;
    }
    removed.push_back(it->dir);
  }
  return removed;
}

std::vector<std::string> remove_files_of_ranks_from(const std::string& dir, int64_t world_size) {
  static const std::regex name("ckpt-([0-9]{1,9})\\.pt");
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string file = it->path().filename().string();
    if (!std::regex_match(file, m, name) || std::stoll(m[1].str()) < world_size) continue;
    std::error_code remove_ec;
    if (fs::remove(it->path(), remove_ec)) removed.push_back(it->path().string());
  }
  return removed;
}

void remove_stale_temporaries(const std::string& dir, const std::string& file) {
  const std::string prefix = "." + file + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.compare(0, prefix.size(), prefix) == 0) fs::remove(it->path(), ec);
  }
}

ResumeTarget resolve_resume_dir(const std::string& dir) {
  if (fs::is_regular_file(fs::path(dir) / "ckpt-0.pt")) return ResumeTarget{dir, false};
  const fs::path latest = fs::path(dir) / "latest";
  std::ifstream in(latest);
  std::string name;
  PSTAR_CHECK(in.good() && std::getline(in, name) && !name.empty(), IoError, "--resume ", dir,
              ": neither ", (fs::path(dir) / "ckpt-0.pt").string(), " nor ", latest.string(),
              " exists; give a checkpoint directory (step-N) or a training.save_dir");
  return ResumeTarget{(fs::path(dir) / name).string(), true};
}

}  // namespace pstar::checkpoint
