// `pstar train --nproc N`: starts N ranks on this host and supervises them.
//
// Why our own launcher: one command on one machine should train on N ranks without torchrun or
// Python. It runs this very binary again (/proc/self/exe, so every rank is the build that was
// started) with torchrun's variables and PSTAR_LAUNCHER=1, which dist::detect_world reads.
// Why pipes: N ranks writing to one terminal tear each other's lines; reading their output here
// and writing whole lines keeps every line intact and says which rank wrote it.
// Why stop everyone on the first failure: the other ranks would wait forever in a collective for
// the dead one, so they get SIGTERM, then SIGKILL after 10 s, and the launcher exits with the
// failing rank's code, as torchrun does.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.h"
#include "pstar/base/error.h"
#include "pstar/formats/file_guard.h"

extern char** environ;

namespace pstar::cmd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStopGrace = std::chrono::seconds(10);
// A rank's pipes normally reach EOF when it exits; a process it left behind may hold them open.
constexpr auto kDrainGrace = std::chrono::seconds(2);
constexpr int kPollMs = 100;               // how soon a signal flag or an exit is noticed
constexpr size_t kMaxLineBytes = 1 << 20;  // a longer "line" is passed on in pieces
constexpr const char* kSelfExe = "/proc/self/exe";

using formats::UniqueFd;

// Writes all of `data`; a closed reader ends the launcher with SIGPIPE, as it would any filter.
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EAGAIN) {  // an inherited non-blocking stdout: wait until it drains
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

void say(const std::string& line) { write_all(STDERR_FILENO, "[pstar] " + line + "\n"); }

int parse_port(const std::string& source, const std::string& text) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  PSTAR_CHECK(!text.empty() && ec == std::errc() && ptr == text.data() + text.size() &&
                  value >= 1 && value <= 65535,
              ConfigError, source, " '", text,
              "' is not a TCP port; give a number in 1..65535 such as 29500, or leave it unset "
              "for a free one");
  return value;
}

// A port nobody listens on now. Another process may take it before rank 0 binds it; that rare
// race shows as a failed rendezvous, and MASTER_PORT avoids it.
int free_loopback_port() {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  PSTAR_CHECK(sock, DistError,
              "cannot open a TCP socket to find a free port: ", std::strerror(errno),
              "; set MASTER_PORT");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  PSTAR_CHECK(::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, DistError,
              "cannot bind a TCP socket on 127.0.0.1 to find a free port: ", std::strerror(errno),
              "; set MASTER_PORT");
  socklen_t len = sizeof addr;
  PSTAR_CHECK(::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0, DistError,
              "cannot read back a free port: ", std::strerror(errno), "; set MASTER_PORT");
  return ntohs(addr.sin_port);
}

int choose_port(const std::string& master_port) {
  if (!master_port.empty()) return parse_port("the master port", master_port);
  if (const char* env = std::getenv("MASTER_PORT")) return parse_port("MASTER_PORT", env);
  return free_loopback_port();
}

// The launcher's environment with the rank variables replaced.
std::vector<std::string> child_environment(int64_t rank, int64_t nproc, int port) {
  static constexpr std::string_view kReplaced[] = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK",    "LOCAL_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "PSTAR_LAUNCHER"};
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    std::string_view name = text.substr(0, text.find('='));
    bool replaced = false;
    for (std::string_view r : kReplaced) replaced = replaced || name == r;
    if (!replaced) env.emplace_back(text);
  }
  env.push_back(str_cat("RANK=", rank));
  env.push_back(str_cat("WORLD_SIZE=", nproc));
  env.push_back(str_cat("LOCAL_RANK=", rank));
  env.push_back(str_cat("LOCAL_WORLD_SIZE=", nproc));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(str_cat("MASTER_PORT=", port));
  env.push_back("PSTAR_LAUNCHER=1");
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// SIGINT and SIGTERM sent to the launcher are forwarded to the ranks. Ctrl-C is the exception:
// the terminal sends it to the whole foreground process group, ranks included (they share the
// launcher's group), and it arrives with si_code SI_KERNEL, so it is not sent a second time (a
// rank that treats a second Ctrl-C as "abort now" must not see one).
volatile sig_atomic_t g_got_int = 0, g_got_term = 0;  // received at all
volatile sig_atomic_t g_forward_int = 0, g_forward_term = 0;

void on_stop_signal(int sig, siginfo_t* info, void*) {
  bool from_terminal = info != nullptr && info->si_code == SI_KERNEL;
  if (sig == SIGINT) {
    g_got_int = 1;
    if (!from_terminal) g_forward_int = 1;
  } else {
    g_got_term = 1;
    if (!from_terminal) g_forward_term = 1;
  }
}

// Installs the stop handlers for the launcher's lifetime and restores the previous ones after. A
// signal the launcher's parent set to be ignored (nohup, `&` in a script) stays ignored.
class SignalGuard {
 public:
  SignalGuard() {
    g_got_int = g_got_term = g_forward_int = g_forward_term = 0;
    struct sigaction action {};
    action.sa_sigaction = on_stop_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < 2; ++i) {
      ::sigaction(kSignals[i], nullptr, &old_[i]);
      installed_[i] = old_[i].sa_handler != SIG_IGN;
      if (installed_[i]) ::sigaction(kSignals[i], &action, nullptr);
    }
    // waitpid needs the exits: an inherited SIGCHLD=SIG_IGN would reap the ranks for us.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGCHLD, &dfl, &old_chld_);
  }
  ~SignalGuard() {
    for (int i = 0; i < 2; ++i)
      if (installed_[i]) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::sigaction(SIGCHLD, &old_chld_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  // In a new rank before execve (async-signal-safe): the rank starts with default handlers.
  void reset_in_child() const {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int i = 0; i < 2; ++i)
      if (installed_[i]) ::sigaction(kSignals[i], &dfl, nullptr);
  }

  static constexpr int kSignals[2] = {SIGINT, SIGTERM};

 private:
  struct sigaction old_[2]{};
  struct sigaction old_chld_ {};
  bool installed_[2] = {false, false};
};

// Blocks SIGINT and SIGTERM around fork, so one that arrives before a rank's execve waits until
// the rank has default handlers (it then acts on the rank) instead of setting the child's copy of
// the launcher's flags.
class BlockStopSignals {
 public:
  BlockStopSignals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &set, &old_);
  }
  ~BlockStopSignals() { restore(); }
  void restore() const { ::sigprocmask(SIG_SETMASK, &old_, nullptr); }
  BlockStopSignals(const BlockStopSignals&) = delete;
  BlockStopSignals& operator=(const BlockStopSignals&) = delete;

 private:
  sigset_t old_;
};

// In a new rank: `text` and errno's digits on fd 2, without allocating (async-signal-safe).
void child_fail(const char* text) {
  int err = errno;
  char digits[16];
  int n = 0;
  do {
    digits[sizeof digits - 1 - n++] = static_cast<char>('0' + err % 10);
    err /= 10;
  } while (err > 0 && n < 15);
  (void)!::write(STDERR_FILENO, text, std::strlen(text));
  (void)!::write(STDERR_FILENO, digits + sizeof digits - n, n);
  (void)!::write(STDERR_FILENO, ")\n", 2);
  ::_exit(127);
}

// One of a rank's output pipes, and the part of a line not yet passed on.
struct Stream {
  UniqueFd fd;
  int64_t rank = 0;
  int target = STDOUT_FILENO;
  std::string pending;
};

struct Rank {
  int64_t rank = 0;
  pid_t pid = -1;
  bool running = false;
  Clock::time_point exited_at;
  Stream out, err;
};

std::string exit_description(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = ::strsignal(WTERMSIG(status));
    return str_cat("was killed by signal ", WTERMSIG(status), name ? str_cat(" (", name, ")") : "");
  }
  return str_cat("exited with code ", WEXITSTATUS(status));
}

class Launch {
 public:
  explicit Launch(int64_t nproc) : ranks_(static_cast<size_t>(nproc)) {}
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  // Ranks still running when the launcher leaves early (an exception) do not outlive it.
  ~Launch() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      ::kill(r.pid, SIGKILL);
      while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }

  void start(int64_t rank, char* const argv[], char* const envp[], const SignalGuard& signals) {
    Rank& r = ranks_[static_cast<size_t>(rank)];
    r.rank = rank;
    int out[2], err[2];
    PSTAR_CHECK(::pipe2(out, O_CLOEXEC) == 0, DistError, "cannot start rank ", rank,
                ": pipe: ", std::strerror(errno));
    r.out.fd = UniqueFd(out[0]);
    UniqueFd out_write(out[1]);
    PSTAR_CHECK(::pipe2(err, O_CLOEXEC) == 0, DistError, "cannot start rank ", rank,
                ": pipe: ", std::strerror(errno));
    r.err.fd = UniqueFd(err[0]);
    UniqueFd err_write(err[1]);
    r.out.target = STDOUT_FILENO;
    r.err.target = STDERR_FILENO;
    r.out.rank = r.err.rank = rank;
    // Only the launcher's ends are non-blocking: a rank writing to a full pipe should wait.
    for (int fd : {out[0], err[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);

    const pid_t launcher = ::getpid();
    BlockStopSignals blocked;
    pid_t pid = ::fork();
    PSTAR_CHECK(pid >= 0, DistError, "cannot start rank ", rank, ": fork: ", std::strerror(errno));
    if (pid == 0) {
      // The rank: only async-signal-safe calls until execve.
      // A launcher killed by SIGKILL cannot stop its ranks; the kernel does (the fork happens on
      // the launcher's main thread, whose exit is what PDEATHSIG watches).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(1);
      if (::dup2(out_write.get(), STDOUT_FILENO) < 0 || ::dup2(err_write.get(), STDERR_FILENO) < 0)
        ::_exit(127);
      signals.reset_in_child();
      blocked.restore();
      ::execve(kSelfExe, argv, envp);
      child_fail("[pstar] cannot execute /proc/self/exe (errno ");
    }
    r.pid = pid;
    r.running = true;
  }

  int supervise() {
    std::optional<int> first_failure;
    Clock::time_point kill_at = Clock::time_point::max();  // max: nobody is being stopped
    bool stopping = false;
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    while (true) {
      if (g_got_int || g_got_term) {
        if (!stopping) say("interrupted; stopping the ranks");
        stopping = true;
      }
      // Cleared before forwarding, so a signal that arrives meanwhile is forwarded next time.
      if (g_forward_int) {
        g_forward_int = 0;
        forward(SIGINT);
      }
      if (g_forward_term) {
        g_forward_term = 0;
        forward(SIGTERM);
      }

      fds.clear();
      streams.clear();
      for (Rank& r : ranks_) {
        for (Stream* s : {&r.out, &r.err}) {
          if (!s->fd) continue;
          fds.push_back({s->fd.get(), POLLIN, 0});
          streams.push_back(s);
        }
      }
      bool running = false;
      for (const Rank& r : ranks_) running = running || r.running;
      if (!running && fds.empty()) break;

      ::poll(fds.data(), fds.size(), kPollMs);  // EINTR: a signal, seen at the top of the loop
      for (size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents != 0) drain(*streams[i]);

      const Clock::time_point now = Clock::now();
      for (Rank& r : ranks_) {
        if (!r.running) continue;
        int status = 0;
        pid_t done = ::waitpid(r.pid, &status, WNOHANG);
        if (done == 0 || (done < 0 && errno == EINTR)) continue;
        r.running = false;
        r.exited_at = now;
        // Its last words (an error message) come before the launcher's line about it.
        drain(r.out);
        drain(r.err);
        if (done < 0) status = W_EXITCODE(1, 0);  // lost (cannot happen with SIGCHLD default)
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
        // Asked to stop, a rank that saved and exited 128 + the signal did what was asked; the
        // others are finishing the same stop and must not get a second signal (which means
        // "now"). The launcher passes that status on.
        const bool stopped_as_asked =
            (g_got_int || g_got_term) && WIFEXITED(status) &&
            (WEXITSTATUS(status) == 128 + SIGINT || WEXITSTATUS(status) == 128 + SIGTERM);
        if (stopped_as_asked) {
          if (!first_failure) first_failure = WEXITSTATUS(status);
          continue;
        }
        if (first_failure) continue;
        first_failure = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        if (!stopping) {
          say(str_cat("rank ", r.rank, " ", exit_description(status),
                      ranks_.size() > 1 ? "; stopping the other ranks" : ""));
        }
        stopping = true;
        forward(SIGTERM);
        kill_at = now + kStopGrace;
      }
      if (now >= kill_at) {
        for (Rank& r : ranks_) {
          if (!r.running) continue;
          say(str_cat("rank ", r.rank, " did not stop within ",
                      std::chrono::duration_cast<std::chrono::seconds>(kStopGrace).count(),
                      " s; killing it"));
          ::kill(r.pid, SIGKILL);
        }
        kill_at = Clock::time_point::max();
      }
      for (Rank& r : ranks_) {
        if (r.running || now - r.exited_at < kDrainGrace) continue;
        for (Stream* s : {&r.out, &r.err}) close_stream(*s);
      }
    }
    return first_failure.value_or(0);
  }

 private:
  void forward(int sig) {
    for (const Rank& r : ranks_)
      if (r.running) ::kill(r.pid, sig);
  }

  // Reads what is there now and passes on the complete lines.
  void drain(Stream& s) {
    char buf[64 * 1024];
    while (s.fd) {
      ssize_t n = ::read(s.fd.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {  // EOF, or an error that ends the stream the same way
        close_stream(s);
        return;
      }
      s.pending.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1)
        emit(s, std::string_view(s.pending).substr(start, nl - start));
      s.pending.erase(0, start);
      if (s.pending.size() > kMaxLineBytes) {
        emit(s, s.pending);
        s.pending.clear();
      }
    }
  }

  void close_stream(Stream& s) {
    if (!s.fd) return;
    if (!s.pending.empty()) emit(s, s.pending);  // a last line without its newline
    s.pending.clear();
    s.fd.reset();
  }

  // One write per line, so lines from different ranks never mix. The engine's logger tags its
  // lines "[pstar rN] " once it knows the rank; anything else (a crash message from a library, or
  // a "[pstar] " line logged before the rank was set, such as a bad config) gets the rank here.
  // A status line redrawn with '\r' is passed through as it is.
  void emit(const Stream& s, std::string_view line) {
    std::string_view body = line.substr(std::min(line.find_first_not_of('\r'), line.size()));
    std::string text;
    constexpr std::string_view kTagged = "[pstar r";
    if (body.substr(0, kTagged.size()) != kTagged) text = str_cat("[rank ", s.rank, "] ");
    text.append(line);
    text.push_back('\n');
    write_all(s.target, text);
  }

  std::vector<Rank> ranks_;
};

std::string self_path() {
  char buf[4096];
  ssize_t n = ::readlink(kSelfExe, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("pstar");
}

}  // namespace

int launch_local(int64_t nproc, const std::vector<std::string>& child_args,
                 const std::string& master_port) {
  PSTAR_CHECK(nproc >= 1, ConfigError, "--nproc ", nproc,
              " is not a number of ranks; give 1 or more (one process per rank on this host)");
  const int port = choose_port(master_port);

  // Everything a rank needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> args = {self_path()};
  args.insert(args.end(), child_args.begin(), child_args.end());
  std::vector<char*> argv = c_strings(args);
  std::vector<std::vector<std::string>> envs;
  std::vector<std::vector<char*>> envps;
  envs.reserve(static_cast<size_t>(nproc));
  for (int64_t r = 0; r < nproc; ++r) envs.push_back(child_environment(r, nproc, port));
  for (auto& env : envs) envps.push_back(c_strings(env));

  SignalGuard signals;
  Launch launch(nproc);
  for (int64_t r = 0; r < nproc; ++r)
    launch.start(r, argv.data(), envps[static_cast<size_t>(r)].data(), signals);
  return launch.supervise();
}

}  // namespace pstar::cmd
