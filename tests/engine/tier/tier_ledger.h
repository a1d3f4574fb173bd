// What the chunk engine's checking tier (engine/tier/checking_tier.h) saw, and the rules it holds
// the engine to: blocks live where kernels are told, copies ahead awaited, nothing touching a host
// Adam still running, and nothing touching a collective's buffers between its mark and its end
// (Note [communication stream] in pstar/tier/device_tier.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pstar/tier/device_tier.h"

namespace pstar::tier::testing {

// What the checking tier saw.
struct Ledger {
  struct Range {
    int64_t bytes;
    Side side;
    bool host_only;  // from allocate_host_only (Note [pinned what moves])
    bool moved;      // from allocate_uninitialized: a move's destination
  };
  std::map<uintptr_t, Range> live;  // by start address
  int64_t live_bytes[2] = {0, 0};   // by Side
  int64_t peak_device_bytes = 0;
  int64_t copied[2][2] = {{0, 0}, {0, 0}};  // [from][to]
  int64_t adam_calls[2] = {0, 0};
  int64_t copied_ahead = 0, awaited = 0;
  int64_t uninitialized_allocations = 0;  // move destinations (allocate_uninitialized)
  int64_t synchronizations = 0;
  // The largest reserved non-model peak the tier reported since the test last cleared it.
  int64_t reported_reserved_peak = 0;
  int64_t host_only_allocations = 0;
  int64_t unfilled_allocations = 0;  // start-up payloads written whole by the engine
  int64_t reserved_host_blocks = 0;  // asked for ahead of the chunks (reserve_host)
  int64_t host_only_copied = 0;      // bytes copied from or into allocate_host_only blocks

  int64_t live_host_only_bytes() const {
    int64_t bytes = 0;
    for (const auto& [start, range] : live) bytes += range.host_only ? range.bytes : 0;
    return bytes;
  }
  // Host memory fit for copies (pinned on the CUDA tier) that holds no payload a move put there.
  int64_t live_unmoved_copyable_host_bytes() const {
    int64_t bytes = 0;
    for (const auto& [start, range] : live)
      bytes += range.side == Side::kHost && !range.host_only && !range.moved ? range.bytes : 0;
    return bytes;
  }
  // Copies ahead not yet awaited, by destination: the bytes to write when they are.
  std::map<uintptr_t, std::vector<uint8_t>> ahead;
  // CheckingTier::set_deferred_host_release: host blocks a copy to the device read since they were
  // allocated; those released, kept from their pool with the host allocations seen since
  // (reap_retired); and how many were.
  bool defer_host_release = false;
  std::set<uintptr_t> copy_sources;
  std::vector<std::pair<Block, int>> retired;
  int64_t retired_blocks = 0;
  std::vector<std::string> violations;
  // Host Adam from another thread than the one that built the tier (Note [host adam overlap]),
  // and the ranges such an Adam is updating right now: nothing else may touch them meanwhile.
  int64_t adam_off_thread = 0;
  int64_t adam_out_of_place = 0;  // Adam calls that wrote the state elsewhere (speculation)
  // Of them, those whose outputs host Adam stores non-temporally from their first element on
  // (optim::detail::streaming_begin, for the ISA in use: Note [streaming stores]).
  int64_t adam_out_of_place_streamed = 0;
  // Gradients summed on the thread that built the tier by the single-buffer call: the norm taking
  // a speculated chunk's sum the worker had not started (Note [speculative adam]).
  int64_t sums_on_owner_thread = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> busy;
  // What an off-thread Adam out of place only reads (its state and gradient): another read may
  // share them, a write may not.
  std::vector<std::pair<uintptr_t, uintptr_t>> reading;
  // Calls may come from the engine's Adam worker too: the tier holds this while it reads or
  // writes the ledger (not while the inner tier works).
  std::mutex mutex;

  // `read`: the caller only reads [p, p + bytes), which an Adam's reads may share.
  void expect_idle(const void* p, int64_t bytes, const char* what, bool read = false) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    const auto overlaps = [&](const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
      for (const auto& [begin, end] : ranges)
        if (p != nullptr && a < end && begin < a + static_cast<uintptr_t>(bytes)) return true;
      return false;
    };
    if (overlaps(busy) || (!read && overlaps(reading)))
      violations.push_back(std::string(what) + " overlaps a host Adam still running");
  }

  // CheckingTier::set_deferred_host_release: a host block just released that a copy to the device
  // read is kept from its pool through the next host allocation (on the CUDA tier the copy may
  // still be queued, and the block returns only once it has run: Note [stream-ordered reuse]);
  // called before each host allocation.
  void reap_retired() {
    for (auto& r : retired) ++r.second;
    retired.erase(std::remove_if(retired.begin(), retired.end(),
                                 [](const std::pair<Block, int>& r) { return r.second >= 2; }),
                  retired.end());
  }
  // Lands a copy ahead into the block at `p`, if one is outstanding.
  bool land(const void* p) {
    const auto it = ahead.find(reinterpret_cast<uintptr_t>(p));
    if (it == ahead.end()) return false;
    std::memcpy(const_cast<void*>(p), it->second.data(), it->second.size());
    ahead.erase(it);
    return true;
  }
  // The engine hands `p` to a kernel: a copy ahead into it must have been awaited.
  void expect_landed(const void* p, const char* what) {
    if (p != nullptr && land(p))
      violations.push_back(std::string(what) + " was copied ahead and not awaited");
  }

  // Whether [p, p + bytes) lies in one live block of `side`.
  bool inside(const void* p, int64_t bytes, Side side) const {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    auto it = live.upper_bound(addr);
    if (it == live.begin()) return false;
    --it;
    return it->second.side == side && addr + static_cast<uintptr_t>(bytes) <=
                                          it->first + static_cast<uintptr_t>(it->second.bytes);
  }
  void expect_inside(const void* p, int64_t bytes, Side side, const char* what) {
    if (p != nullptr && !inside(p, bytes, side))
      violations.push_back(std::string(what) + " is not in a live " + side_name(side) + " block");
  }
  // The same under the mutex, for a caller on another thread (a communicator's).
  void expect_inside_locked(const void* p, int64_t bytes, Side side, const char* what) {
    const std::lock_guard<std::mutex> lock(mutex);
    expect_inside(p, bytes, side, what);
  }
  // A copy between the sides touches [p, p + bytes): counts it if that is host-only memory.
  void note_copy_of(const void* p, int64_t bytes) {
    const auto it = live.find(reinterpret_cast<uintptr_t>(p));
    if (it != live.end() && it->second.host_only) host_only_copied += bytes;
  }
  // ---- Note [communication stream] ----
  // Every range operation of the tier gets the next sequence number. A mark is the number at the
  // moment it was taken; while one is outstanding, the operations of threads outside a
  // communication scope are kept (`touches`), and when a scope finishes, none of those after its
  // mark may touch a range its collective used (`in_flight`, which the test's communicator
  // registers from inside the scope, and the engine declares to it: the gradients a reduction
  // reads and the sum it writes, which the communicator does not see): on the CUDA tier they would
  // run beside the collective on another stream.
  struct Touch {
    int64_t seq;
    uintptr_t begin, end;
    std::string what;
  };
  struct Scope {
    int64_t mark_seq;
    std::vector<std::pair<uintptr_t, uintptr_t>> in_flight;
  };
  int64_t seq = 0;
  int64_t marks = 0, comm_scopes = 0;
  int64_t declared_uses = 0;  // ranges the engine declared to its scopes (CommStreamScope::uses)
  std::multiset<int64_t> open_marks;
  std::vector<Touch> touches;
  std::map<std::thread::id, Scope> scopes;  // the scope each communication thread is in

  // The tier's operation `what` on [p, p + bytes), from any thread.
  void touch(const void* p, int64_t bytes, const char* what) {
    ++seq;
    if (p == nullptr || bytes <= 0 || open_marks.empty()) return;
    if (scopes.count(std::this_thread::get_id()) != 0) return;  // the collective's own work
    const auto a = reinterpret_cast<uintptr_t>(p);
    touches.push_back(Touch{seq, a, a + static_cast<uintptr_t>(bytes), what});
  }
  // From the test's communicator, inside a scope: its collective uses [p, p + bytes).
  void in_flight_locked(const void* p, int64_t bytes) {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = scopes.find(std::this_thread::get_id());
    if (it == scopes.end()) {
      violations.push_back("a collective outside a communication stream's scope");
      return;
    }
    const auto a = reinterpret_cast<uintptr_t>(p);
    it->second.in_flight.emplace_back(a, a + static_cast<uintptr_t>(bytes));
  }
  // The scope of this thread ends: the checks above, then the touches no mark needs go.
  void end_scope_locked() {
    const auto it = scopes.find(std::this_thread::get_id());
    if (it == scopes.end()) return;
    for (const Touch& t : touches) {
      if (t.seq <= it->second.mark_seq) continue;
      for (const auto& [begin, end] : it->second.in_flight) {
        if (t.begin < end && begin < t.end) {
          violations.push_back(t.what + " touched a collective's buffer after its mark, before " +
                               "the collective finished");
          break;
        }
      }
    }
    scopes.erase(it);
    const int64_t oldest = open_marks.empty() ? seq : *open_marks.begin();
    touches.erase(std::remove_if(touches.begin(), touches.end(),
                                 [&](const Touch& t) { return t.seq <= oldest; }),
                  touches.end());
  }
};

}  // namespace pstar::tier::testing
