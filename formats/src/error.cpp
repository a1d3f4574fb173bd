#include "pstar/base/error.h"

namespace pstar {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConfig:
      return "config error";
    case ErrorKind::kIo:
      return "I/O error";
    case ErrorKind::kFormat:
      return "format error";
    case ErrorKind::kOutOfMemory:
      return "out of memory";
    case ErrorKind::kDist:
      return "distributed error";
    case ErrorKind::kNumeric:
      return "numeric error";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "error";
}

int error_exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kConfig:
      return 2;
    case ErrorKind::kIo:
      return 3;
    case ErrorKind::kFormat:
      return 4;
    case ErrorKind::kOutOfMemory:
      return 5;
    case ErrorKind::kDist:
      return 6;
    case ErrorKind::kNumeric:
      return 7;
    case ErrorKind::kInternal:
      return 70;
  }
  return 1;
}

}  // namespace pstar
