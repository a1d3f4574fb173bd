// Runs the built `pstar` binary as a subprocess, as a user or a script would, for the cmd tests.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pstar_test_paths.h"

namespace pstar::cmd {

namespace fs = std::filesystem;

inline const char* const kPstar = PSTAR_BINARY_DIR "/pstar";

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::ostream& operator<<(std::ostream& os, const RunResult& r) {
  return os << "exit code " << r.exit_code << "\n--- stdout ---\n"
            << r.out << "--- stderr ---\n"
            << r.err;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using UniqueFile = std::unique_ptr<std::FILE, FileCloser>;

inline std::string read_all(std::FILE* f) {
  std::string text;
  std::rewind(f);
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  return text;
}

// A `pstar` child still running: its pid and the files its stdout and stderr go to.
struct Spawned {
  pid_t pid = -1;
  UniqueFile out, err;
};

// Starts `pstar ARGS...` in `cwd` with `env` ("NAME=VALUE") added to this process's environment.
// stdout and stderr go to anonymous temporary files rather than pipes, so a chatty child can never
// block on a full pipe while we wait. `max_file_bytes` >= 0 caps the size of any file the child
// writes (RLIMIT_FSIZE; SIGXFSZ ignored so writes fail with EFBIG, as on a full disk).
inline Spawned spawn_pstar(const std::vector<std::string>& args, const fs::path& cwd,
                           const std::vector<std::string>& env = {}, long max_file_bytes = -1) {
  Spawned child;
  child.out.reset(std::tmpfile());
  child.err.reset(std::tmpfile());
  if (!child.out || !child.err) {
    ADD_FAILURE() << "tmpfile: " << std::strerror(errno);
    return child;
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> storage{kPstar};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage(env);
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const auto& extra : env) replaced = replaced || extra.rfind(name, 0) == 0;
    if (!replaced) env_storage.push_back(entry);
  }
  std::vector<char*> envp;
  for (auto& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string dir = cwd.string();
  const int out_fd = fileno(child.out.get()), err_fd = fileno(child.err.get());
  std::fflush(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return child;
  }
  if (pid == 0) {
    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0) _exit(126);
    if (max_file_bytes >= 0) {
      const rlimit limit{static_cast<rlim_t>(max_file_bytes), static_cast<rlim_t>(max_file_bytes)};
      signal(SIGXFSZ, SIG_IGN);
      if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(126);
    }
    if (chdir(dir.c_str()) != 0) {
      static const char msg[] = "run_pstar: chdir failed\n";
      (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
      _exit(126);
    }
    execve(argv[0], argv.data(), envp.data());
    static const char msg[] = "run_pstar: execve failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  child.pid = pid;
  return child;
}

// Waits for a spawned child. With `timeout_s` > 0 a child still running then is killed, the
// test fails, and exit_code is -1.
inline RunResult wait_pstar(Spawned& child, double timeout_s = 0) {
  RunResult result;
  if (child.pid < 0) return result;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const pid_t done = waitpid(child.pid, &status, timeout_s > 0 ? WNOHANG : 0);
    if (done == child.pid) break;
    if (done < 0 && errno != EINTR) {
      ADD_FAILURE() << "waitpid: " << std::strerror(errno);
      return result;
    }
    if (timeout_s > 0 && std::chrono::steady_clock::now() > deadline) {
      kill(child.pid, SIGKILL);
      waitpid(child.pid, &status, 0);
      ADD_FAILURE() << "pstar (pid " << child.pid << ") still running after " << timeout_s
                    << " s; killed";
      result.out = read_all(child.out.get());
      result.err = read_all(child.err.get());
      child.pid = -1;
      return result;
    }
    if (timeout_s > 0) usleep(50 * 1000);
  }
  child.pid = -1;
  if (WIFEXITED(status))
    result.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    result.exit_code = 128 + WTERMSIG(status);
  result.out = read_all(child.out.get());
  result.err = read_all(child.err.get());
  return result;
}

// Runs `pstar ARGS...` in `cwd` and waits for it (see spawn_pstar).
inline RunResult run_pstar(const std::vector<std::string>& args, const fs::path& cwd,
                           const std::vector<std::string>& env = {}) {
  Spawned child = spawn_pstar(args, cwd, env);
  return wait_pstar(child);
}

// `pstar train CONFIG --device cpu EXTRA...` in `cwd`.
inline RunResult train_on_cpu(const std::string& config_path, const std::vector<std::string>& extra,
                              const fs::path& cwd) {
  std::vector<std::string> args{"train", config_path, "--device", "cpu"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_pstar(args, cwd);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace pstar::cmd
