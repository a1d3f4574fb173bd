// Fuzz target: checkpoint files (pstar::checkpoint::read_checkpoint_file: LibTorch's zip reader and
// unpickler), and the checkpoint manifest (read_manifest).
//
// An input that starts like a zip file ("PK\3\4") is the checkpoint file itself, which exercises
// the container. Any other input is the archive's contents: the pickle, then the tensor records
// "0", "1", ..., each after a line "@record@"; the target zips them with LibTorch's own writer, so
// that mutations reach the unpickler instead of breaking the zip's offsets and sizes. Every input
// is also tried as a manifest.json.
//
// Left out (return -1): pickles whose opcodes do not balance, on which LibTorch 1.13's unpickler
// reads outside its own stack and crashes (Note [unbalanced pickles]).
//
// Beyond "only FormatError or IoError, naming the file": every tensor read must lie inside its
// storage (checked and read here, in instrumented code: LibTorch itself is not instrumented, so
// ASan would miss its reads past a buffer), and checkpoint_tensor must accept it with its own
// shape and dtype and refuse it with another shape.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "pstar/checkpoint/store.h"

namespace {

using pstar::str_cat;
using pstar::fuzz::finding;

constexpr char kZipMagic[] = "PK\x03\x04";
constexpr char kRecordSeparator[] = "\n@record@\n";

// The zip PyTorchStreamWriter makes of the pickle and tensor records in `input`.
std::vector<uint8_t> archive_of(const std::string& input) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (true) {
    const size_t next = input.find(kRecordSeparator, start);
    pieces.push_back(input.substr(start, next - start));
    if (next == std::string::npos) break;
    start = next + sizeof(kRecordSeparator) - 1;
  }
  std::vector<uint8_t> zip;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* bytes, size_t n) {
    const auto* p = static_cast<const uint8_t*>(bytes);
    zip.insert(zip.end(), p, p + n);
    return n;
  });
  writer.writeRecord("data.pkl", pieces[0].data(), pieces[0].size());
  for (size_t i = 1; i < pieces.size(); ++i) {
    writer.writeRecord(str_cat("data/", i - 1), pieces[i].data(), pieces[i].size());
  }
  writer.writeEndOfFile();
  return zip;
}

// Note [unbalanced pickles]: LibTorch 1.13's unpickler takes values off its stack without
// checking that they are there (BUILD or REDUCE with fewer than two values, a TUPLE, DICT or LIST
// whose MARK lies above the stack top, a DICT with a key but no value, ...), and segfaults inside
// LibTorch (found by this target; docs/fuzzing.md lists it). That is not pstar's code, and no
// small check in read_checkpoint_file can prevent it, so such pickles are left out: this walk reads
// each opcode as the unpickler does and tracks only how many values and marks it would hold. It
// errs towards leaving a pickle out. A pickle it cannot follow (truncated, an opcode LibTorch does
// not know) is kept: LibTorch refuses those with an error.
bool unbalanced(const std::string& pickle) {
  size_t pos = 2;  // after PROTO 2, which LibTorch checks
  int64_t depth = 0;
  std::vector<int64_t> marks;
  auto skip = [&](size_t n) {
    if (n > pickle.size() - pos) return false;
    pos += n;
    return true;
  };
  auto length32 = [&](size_t* n) {
    if (pos + 4 > pickle.size()) return false;
    *n = 0;
    for (int i = 3; i >= 0; --i) *n = (*n << 8) | static_cast<uint8_t>(pickle[pos + i]);
    pos += 4;
    return true;
  };
  auto line = [&] {
    const size_t end = pickle.find('\n', pos);
    if (end == std::string::npos) return false;
    pos = end + 1;
    return true;
  };
  // Pops to the innermost mark; false if there is none or it lies above the stack top.
  auto to_mark = [&](int64_t* start) {
    if (marks.empty() || marks.back() > depth) return false;
    *start = marks.back();
    marks.pop_back();
    return true;
  };
  if (pickle.size() < 2) return false;
  while (pos < pickle.size()) {
    const uint8_t op = static_cast<uint8_t>(pickle[pos++]);
    int64_t start = 0;
    size_t n = 0;
    switch (op) {
      case ']':
      case ')':
      case 'N':
      case 0x88:
      case 0x89:
      case '}':  // push a value
        ++depth;
        break;
      case 'K':
      case 'h':  // push, with a 1-byte argument
        if (!skip(1)) return false;
        ++depth;
        break;
      case 'M':
        if (!skip(2)) return false;
        ++depth;
        break;
      case 'J':
      case 'j':
        if (!skip(4)) return false;
        ++depth;
        break;
      case 'G':
        if (!skip(8)) return false;
        ++depth;
        break;
      case 0x8a:  // LONG1: a length byte, which LibTorch requires to be 8, then the value
        if (!skip(9)) return false;
        ++depth;
        break;
      case 'X':
        if (!length32(&n) || !skip(n)) return false;
        ++depth;
        break;
      case 'c':  // GLOBAL: module and name lines; pushes what the name stands for
        if (!line() || !line()) return false;
        ++depth;
        break;
      case 'q':
      case 'r':  // memo the top value
        if (depth < 1) return true;
        if (!skip(op == 'q' ? 1 : 4)) return false;
        break;
      case '(':
        marks.push_back(depth);
        break;
      case 't':
      case 'l':  // TUPLE, LIST: the values since the mark become one
        if (!to_mark(&start)) return true;
        depth = start + 1;
        break;
      case 'd':  // DICT: key, value pairs since the mark
        if (!to_mark(&start) || (depth - start) % 2 != 0) return true;
        depth = start + 1;
        break;
      case 'e':
      case 'u':  // APPENDS, SETITEMS: into the container below the mark
        if (!to_mark(&start) || start == 0 || (op == 'u' && (depth - start) % 2 != 0)) return true;
        depth = start;
        break;
      case 0x85:
      case 0x86:
      case 0x87:  // TUPLE1..3
        n = op - 0x84;
        if (depth < static_cast<int64_t>(n)) return true;
        depth -= static_cast<int64_t>(n) - 1;
        break;
      case 0x81:
      case 'Q':  // NEWOBJ pops the empty tuple; BINPERSID replaces its tuple
        if (depth < 1) return true;
        if (op == 0x81) --depth;
        break;
      case 'b':
      case 'R':
      case 'a':  // BUILD, REDUCE: a callable and its argument; APPEND
        if (depth < 2) return true;
        --depth;
        break;
      case 's':  // SETITEM: dict, key, value
        if (depth < 3) return true;
        depth -= 2;
        break;
      default:  // STOP, or an opcode LibTorch refuses: nothing more is read
        return false;
    }
  }
  return false;
}

// The highest byte offset (exclusive) that `t`'s elements reach in its storage.
int64_t end_in_storage(const at::Tensor& t) {
  int64_t last = t.storage_offset();
  if (t.numel() == 0) return 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) finding(str_cat("a tensor has a negative stride ", t.stride(d)));
    last += (t.size(d) - 1) * t.stride(d);
  }
  return (last + 1) * static_cast<int64_t>(t.element_size());
}

void check_tensors(const pstar::checkpoint::TensorMap& tensors, const std::string& path) {
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) finding(str_cat("tensor '", name, "' is undefined"));
    if (!t.device().is_cpu() || t.layout() != at::kStrided) {
      finding(str_cat("tensor '", name, "' is not a strided CPU tensor"));
    }
    const int64_t end = end_in_storage(t);
    const int64_t storage_bytes = static_cast<int64_t>(t.storage().nbytes());
    if (t.storage_offset() < 0 || end > storage_bytes) {
      finding(str_cat("tensor '", name, "' (sizes ", t.sizes(), ", strides ", t.strides(),
                      ", offset ", t.storage_offset(), ") reaches byte ", end, " of a ",
                      storage_bytes, "-byte storage"));
    }
    if (storage_bytes > 0) {
      const auto* bytes = static_cast<const uint8_t*>(t.storage().data());
      volatile uint8_t sum = 0;
      for (int64_t i = 0; i < storage_bytes; ++i) sum = sum + bytes[i];
    }
    const at::Tensor& same =
        pstar::checkpoint::checkpoint_tensor(tensors, name, path, t.sizes(), t.scalar_type());
    if (!same.is_same(t)) finding("checkpoint_tensor returned another tensor");
    std::vector<int64_t> other_shape = t.sizes().vec();
    other_shape.push_back(2);
    const std::string& key = name;  // a lambda cannot capture a structured binding in C++17
    const c10::ScalarType dtype = t.scalar_type();
    pstar::fuzz::expect_typed_errors(path, {pstar::ErrorKind::kFormat}, [&] {
      pstar::checkpoint::checkpoint_tensor(tensors, key, path, other_shape, dtype);
      finding("checkpoint_tensor accepted a tensor of another shape");
    });
  }
}

void fuzz_manifest(const uint8_t* data, size_t size) {
  static pstar::fuzz::ScratchDir dir;
  const std::string path = dir.write("manifest.json", data, size);
  pstar::fuzz::expect_typed_errors(path, {pstar::ErrorKind::kFormat}, [&] {
    const pstar::checkpoint::CheckpointManifest m = pstar::checkpoint::read_manifest(dir.path());
    if (m.world_size < 1) finding(str_cat("read_manifest accepted world_size ", m.world_size));
    if (!m.digests.empty() && static_cast<int64_t>(m.digests.size()) != m.world_size) {
      finding(str_cat("read_manifest accepted ", m.digests.size(), " digests for ", m.world_size,
                      " ranks"));
    }
  });
}

}  // namespace

// Note [allocation failure]: LibTorch's unpickler sizes its memo table from an index in the file
// (docs/fuzzing.md), so a corrupt checkpoint can ask for tens of GiB. Outside ASan that allocation
// fails with std::bad_alloc, which read_checkpoint_file reports as a FormatError; ASan's throwing
// operator new aborts instead. These replacements throw as the real one does, on top of ASan's
// nothrow operator new (so ASan's operator delete still matches): with
// ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=256 (tests.cmake) every
// allocation over 256 MiB fails that way, here and in LibTorch, whose calls bind to the
// executable's operator new.
void* operator new(size_t size) {
  if (void* p = ::operator new(size, std::nothrow)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t size) {
  if (void* p = ::operator new[](size, std::nothrow)) return p;
  throw std::bad_alloc();
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One intra-op thread: the fuzzer runs one input at a time, and ctest runs targets side by side.
  at::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static pstar::fuzz::MemFile file("checkpoint");
  const std::string input(reinterpret_cast<const char*>(data), size);
  const bool raw = input.compare(0, sizeof(kZipMagic) - 1, kZipMagic) == 0;
  std::string path;
  std::string pickle;
  if (raw) {
    path = file.write(data, size);
    try {
      caffe2::serialize::PyTorchStreamReader reader(path);
      const auto [bytes, n] = reader.getRecord("data.pkl");
      pickle.assign(static_cast<const char*>(bytes.get()), n);
    } catch (const std::exception&) {
      // Not a readable archive: read_checkpoint_file must say so.
    }
  } else {
    pickle = input.substr(0, input.find(kRecordSeparator));
    const std::vector<uint8_t> zip = archive_of(input);
    path = file.write(zip.data(), zip.size());
  }
  if (unbalanced(pickle)) return -1;  // Note [unbalanced pickles]
  pstar::fuzz::expect_typed_errors(path, {pstar::ErrorKind::kFormat, pstar::ErrorKind::kIo}, [&] {
    check_tensors(pstar::checkpoint::read_checkpoint_file(path), path);
  });
  fuzz_manifest(data, size);
  return 0;
}
