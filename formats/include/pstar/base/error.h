// Typed errors for every pstar layer. They are thrown where a problem is found and caught only at
// the command boundary (cmd/main.cpp), which prints one line and exits with the kind's code.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace pstar {

enum class ErrorKind {
  kConfig,       // a config key, flag or value the user gave is wrong
  kIo,           // a file could not be opened, read or written
  kFormat,       // a file's contents are malformed
  kOutOfMemory,  // a memory budget cannot hold what is needed
  kDist,         // a distributed (c10d) problem
  kNumeric,      // training diverged: a non-finite loss or gradient
  kInternal,     // a broken invariant: a bug in pstar
};

const char* error_kind_name(ErrorKind kind);
// Distinct process exit codes per kind, documented in docs/cli.md.
int error_exit_code(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

#define PSTAR_DEFINE_ERROR(Name, Kind)                                             \
  class Name : public Error {                                                      \
   public:                                                                         \
    explicit Name(const std::string& message) : Error(ErrorKind::Kind, message) {} \
  };
PSTAR_DEFINE_ERROR(ConfigError, kConfig)
PSTAR_DEFINE_ERROR(IoError, kIo)
PSTAR_DEFINE_ERROR(FormatError, kFormat)
PSTAR_DEFINE_ERROR(OutOfMemoryError, kOutOfMemory)
PSTAR_DEFINE_ERROR(DistError, kDist)
PSTAR_DEFINE_ERROR(NumericError, kNumeric)
PSTAR_DEFINE_ERROR(InternalError, kInternal)
#undef PSTAR_DEFINE_ERROR

// Concatenates anything with an operator<< into one string.
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace pstar

// PSTAR_CHECK(cond, ConfigError, "what went wrong: ", value, "; what would work")
#define PSTAR_CHECK(cond, ErrorType, ...)                                 \
  do {                                                                    \
    if (!(cond)) throw ::pstar::ErrorType(::pstar::str_cat(__VA_ARGS__)); \
  } while (0)

#define PSTAR_THROW(ErrorType, ...) throw ::pstar::ErrorType(::pstar::str_cat(__VA_ARGS__))

// For invariants only, never for anything a user can cause.
#define PSTAR_INTERNAL_ASSERT(cond, ...)                                                           \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      throw ::pstar::InternalError(::pstar::str_cat("internal error at ", __FILE__, ":", __LINE__, \
                                                    ": assertion '", #cond, "' failed. ",          \
                                                    ##__VA_ARGS__));                               \
  } while (0)
