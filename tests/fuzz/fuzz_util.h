// Helpers shared by the libFuzzer targets in tests/fuzz (docs/fuzzing.md): files for readers that
// take a path, and the rule every target applies to what a reader throws.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <set>
#include <string>
#include <typeinfo>

#include "pstar/base/error.h"

namespace pstar::fuzz {

// Prints what went wrong and aborts, which libFuzzer reports as a crash and saves the input for.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n==pstar-fuzz== FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// One memfd per process, rewritten for each input: readers that need a path open
// /proc/self/fd/N, a regular file that never touches the disk and needs no clean-up.
class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) finding("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the contents; returns the path to give the reader.
  const std::string& write(const void* bytes, size_t size) {
    if (::ftruncate(fd_, 0) != 0) finding("ftruncate of the memfd failed");
    const auto* p = static_cast<const uint8_t*>(bytes);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, p + done, size - done, static_cast<off_t>(done));
      if (n <= 0) finding("pwrite to the memfd failed");
      done += static_cast<size_t>(n);
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

// A private directory (in /dev/shm where it can, so nothing touches the disk) for readers that need
// a real path: HDF5 resolves symbolic links and so cannot open /proc/self/fd/N of a memfd, and
// read_manifest takes a directory. Removed, with what was written into it, at a normal exit; a
// run that crashed leaves its directory behind, and the next one removes it.
class ScratchDir {
 public:
  ScratchDir() {
    const std::filesystem::path parent = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    remove_stale(parent);
    path_ = str_cat(parent.string(), "/pstar-fuzz-", ::getpid(), "-XXXXXX");
    if (::mkdtemp(path_.data()) == nullptr) finding("mkdtemp failed");
  }
  ~ScratchDir() {
    for (const std::string& name : names_) ::unlink((path_ + "/" + name).c_str());
    ::rmdir(path_.c_str());
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

  // `path()/name` holding `bytes` (replacing what it held); returns that path.
  std::string write(const std::string& name, const void* bytes, size_t size) {
    const std::string file = path_ + "/" + name;
    names_.insert(name);
    FILE* f = std::fopen(file.c_str(), "wb");
    if (f == nullptr || (size > 0 && std::fwrite(bytes, 1, size, f) != size) ||
        std::fclose(f) != 0) {
      finding("cannot write " + file);
    }
    return file;
  }
  // The path of `name` in the directory, for a file something else writes; removed at exit too.
  std::string file(const std::string& name) {
    names_.insert(name);
    return path_ + "/" + name;
  }

 private:
  // Removes the directories of runs that are gone (a crash ends a run without clean-up).
  static void remove_stale(const std::filesystem::path& parent) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
      const std::string name = entry.path().filename().string();
      const std::string prefix = "pstar-fuzz-";
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        std::filesystem::remove_all(entry.path(), ec);
      }
    }
  }

  std::string path_;
  std::set<std::string> names_;
};

// Runs `read`. A pstar::Error of one of the `allowed` kinds whose message names `subject` (the
// file or config source) is the reader doing its job. Anything else is a finding: another error
// kind (an InternalError means an invariant broke), a message that does not say which file is at
// fault, or any other exception escaping (a raw std:: or nlohmann exception where the reader
// promises a typed error).
template <typename F>
void expect_typed_errors(const std::string& subject, std::initializer_list<ErrorKind> allowed,
                         F&& read) {
  try {
    read();
  } catch (const Error& e) {
    // PSTAR_FUZZ_VERBOSE=1: say why each input was refused (when reproducing one by hand).
    static const bool verbose = std::getenv("PSTAR_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
    bool ok = false;
    for (ErrorKind kind : allowed) ok = ok || e.kind() == kind;
    if (!ok) {
      finding(str_cat("the reader threw a kind it does not document (", error_kind_name(e.kind()),
                      "): ", e.what()));
    }
    if (std::string(e.what()).find(subject) == std::string::npos) {
      finding(
          str_cat("the ", error_kind_name(e.kind()), " does not name '", subject, "': ", e.what()));
    }
  } catch (const std::exception& e) {
    finding(str_cat("untyped exception escaped (", typeid(e).name(), "): ", e.what()));
  } catch (...) {
    finding("an exception not derived from std::exception escaped");
  }
}

}  // namespace pstar::fuzz
