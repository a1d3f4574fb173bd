// The per-tier fit of model data (Note [fit] and Note [nvme fit] in pstar/plan/memory_plan.h),
// over chunks that may differ in size (Note [chunk sizes] in pstar/plan/chunk_layout.h).
#include <algorithm>

#include "pstar/base/error.h"
#include "pstar/base/size.h"
#include "pstar/plan/memory_plan.h"

namespace pstar::plan {
namespace {

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

using Home = Fit::Home;

// One rank's owned chunks (rank 0's, the largest share): their sizes in order, and how many of
// the first are host-pinned.
struct Owned {
  std::vector<int64_t> sizes;
  int64_t pinned = 0;
  int64_t count() const { return static_cast<int64_t>(sizes.size()); }
};

Owned owned_chunks(const FitInput& in) {
  Owned o;
  for (int64_t k = 0; k < in.layout.num_chunks; k += in.world_size)
    o.sizes.push_back(in.layout.size_of(k));
  o.pinned = ceil_div(in.layout.host_pinned_chunks, in.world_size);
  return o;
}

// Places `order` (indices into `owned`) whole: a prefix on the host while `host_room` lasts, the
// rest on the device. Returns the device bytes they need.
int64_t split_whole(const Owned& owned, const std::vector<int64_t>& order, int64_t host_room,
                    int64_t whole, std::vector<Home>* homes) {
  int64_t host = 0, device = 0;
  bool on_host = true;
  for (int64_t i : order) {
    const int64_t bytes = owned.sizes[static_cast<size_t>(i)] * whole;
    on_host = on_host && host + bytes <= host_room;
    (on_host ? host : device) += bytes;
    if (homes != nullptr) (*homes)[static_cast<size_t>(i)] = on_host ? Home::kHost : Home::kDevice;
  }
  return device;
}

// One rank's chunks with `n` ordinary ones keeping their optimizer payloads on NVMe (Note [nvme
// fit]): the first `nvme_host` of the candidates compute on the host, the last `nvme_device` on
// the device; the others are placed whole.
struct NvmePlacement {
  bool feasible = false;  // the compute payloads of the NVMe chunks find room
  bool fits = false;      // and the other chunks too, whole
  int64_t nvme = 0, nvme_host = 0, nvme_device = 0;
  int64_t staging = 0;  // the NVMe staging pool, per rank
  std::vector<Home> homes;
};

}  // namespace

int64_t nvme_staging_per_rank(int64_t nvme_chunks, int64_t chunk_size, const PayloadBytes& payload,
                              int64_t block) {
  PSTAR_INTERNAL_ASSERT(block >= 1);
  const int64_t buffer = (chunk_size * payload.optimizer() + block - 1) / block * block;
  return std::min(nvme_chunks, kNvmeStagingChunks) * buffer;
}

Fit check_fit(const FitInput& in) {
  PSTAR_INTERNAL_ASSERT(in.world_size >= 1 && in.ranks_per_host >= 1 && in.nvme_capacity >= 0);
  const int64_t whole = in.payload.whole();                                 // per element
  const int64_t compute = in.layout.chunk_size * in.payload.compute();      // an ordinary chunk's
  const int64_t optimizer = in.layout.chunk_size * in.payload.optimizer();  // an ordinary chunk's
  const int64_t r = in.ranks_per_host;
  const Owned owned = owned_chunks(in);
  int64_t largest = 0, second = 0, model_elements = 0, pinned_elements = 0;
  for (int64_t i = 0; i < owned.count(); ++i) {
    const int64_t size = owned.sizes[static_cast<size_t>(i)];
    model_elements += size;
    if (i < owned.pinned) pinned_elements += size;
    second = std::max(second, std::min(largest, size));
    largest = std::max(largest, size);
  }
  if (owned.count() == 1) second = largest;  // the working set is two groups' worth
  const int64_t oversized = in.layout.oversized_chunks;
  const std::string chunks_of = str_cat(
      " chunks of ", format_bytes(in.layout.chunk_size * whole),
      oversized > 0 ? str_cat(", ", oversized, " of them larger, for one module each") : "");
  Fit f;
  f.owned_chunks = owned.count();
  f.owned.padding_bytes = ceil_div(in.layout.padding_elements(), in.world_size) * whole;
  f.host_staging = in.staging_per_rank * r;
  f.device_working =
      in.world_size * (largest + second) * in.payload.compute() + in.device_reduce_buffer;
  f.device_non_model = in.non_model;
  f.device_limit = static_cast<int64_t>(device_fill_bytes(in.device_budget));
  f.nvme_limit = static_cast<int64_t>(kNvmeFillRatio * static_cast<double>(in.nvme_capacity));

  // Tallies the homes into the report's counts and bytes.
  auto tally = [&](const std::vector<Home>& homes) {
    f.owned.homes = homes;
    f.host_chunks = f.device_chunks = f.nvme_host_chunks = f.nvme_device_chunks = 0;
    f.owned.host_elements = f.owned.device_elements = f.owned.nvme_host_elements =
        f.owned.nvme_device_elements = 0;
    for (size_t i = 0; i < homes.size(); ++i) {
      const int64_t size = owned.sizes[i];
      switch (homes[i]) {
        case Home::kHost:
          ++f.host_chunks, f.owned.host_elements += size;
          break;
        case Home::kDevice:
          ++f.device_chunks, f.owned.device_elements += size;
          break;
        case Home::kHostNvme:
          ++f.nvme_host_chunks, f.owned.nvme_host_elements += size;
          break;
        case Home::kDeviceNvme:
          ++f.nvme_device_chunks, f.owned.nvme_device_elements += size;
          break;
      }
    }
    f.nvme_chunks = f.nvme_host_chunks + f.nvme_device_chunks;
    const int64_t compute_per = in.payload.compute();
    f.device_static = f.owned.device_elements * whole + f.owned.nvme_device_elements * compute_per;
    f.device_used = f.device_static + f.device_working + f.device_non_model;
    f.host_model = r * (f.owned.host_elements * whole + f.owned.nvme_host_elements * compute_per);
    f.nvme_used =
        r * (f.owned.nvme_host_elements + f.owned.nvme_device_elements) * in.payload.optimizer();
  };

  // Host first (every chunk starts there), then the device takes the rest for good.
  const int64_t host_room = std::max<int64_t>(0, in.host_budget - f.host_staging);
  std::vector<int64_t> all(static_cast<size_t>(owned.count()));
  for (int64_t i = 0; i < owned.count(); ++i) all[static_cast<size_t>(i)] = i;
  std::vector<Home> homes(static_cast<size_t>(owned.count()), Home::kHost);
  split_whole(owned, all, host_room / r, whole, &homes);
  tally(homes);
  f.host_used = f.host_model + f.host_staging;

  const int64_t model_data = model_elements * whole;
  const int64_t device_room = f.device_limit - f.device_working - f.device_non_model;
  bool pinned_on_host = true;
  for (int64_t i = 0; i < owned.pinned; ++i)
    pinned_on_host = pinned_on_host && homes[static_cast<size_t>(i)] == Home::kHost;
  if (!pinned_on_host) {
    f.reason =
        str_cat("host tier: the embedding chunks kept on the host (use_cpu_embedding) need ",
                format_bytes(pinned_elements * whole * r), " but only ", format_bytes(host_room),
                " is available; raise the host memory or turn "
                "use_cpu_embedding off");
  } else if (f.device_working + f.device_non_model > in.device_budget) {
    f.reason = str_cat("device tier: the working set (", format_bytes(f.device_working),
                       ") plus the predicted non-model peak (", format_bytes(f.device_non_model),
                       ") exceed the device budget (", format_bytes(in.device_budget),
                       "); lower the micro-batch, turn activation checkpointing on, or lower the "
                       "chunk size");
  } else if (f.device_chunks > 0 && f.device_used > f.device_limit) {
    f.reason = str_cat("model data needs ", format_bytes(model_data), " per rank (", f.owned_chunks,
                       chunks_of, "); the host holds ", f.host_chunks, " and the other ",
                       f.device_chunks, " (", format_bytes(f.device_static),
                       ") do not fit on the device next to the "
                       "working set and non-model memory (room for ",
                       format_bytes(std::max<int64_t>(0, device_room)),
                       "); raise the host or device memory, or train a smaller model");
    if (in.nvme_capacity > 0) {
      // Note [nvme fit]: the fewest chunks whose optimizer payloads move to NVMe. Only ordinary,
      // movable chunks go there (NVMe slots are ordinary chunks), not a split module's parts.
      std::vector<int64_t> candidates;
      for (int64_t i = owned.pinned; i < owned.count(); ++i)
        if (owned.sizes[static_cast<size_t>(i)] == in.layout.chunk_size &&
            in.layout.part_of(i * in.world_size) < 0)
          candidates.push_back(i);
      const int64_t device_free = std::max<int64_t>(0, device_room);
      const int64_t pinned_bytes = pinned_elements * whole;
      auto place = [&](int64_t n) {
        NvmePlacement p;
        p.nvme = n;
        p.staging = nvme_staging_per_rank(n, in.layout.chunk_size, in.payload, in.nvme_block);
        const int64_t host_free =
            std::max<int64_t>(0, in.host_budget - r * (in.staging_per_rank + p.staging)) / r -
            pinned_bytes;  // host-pinned chunks stay whole on the host
        if (host_free < 0) return p;
        p.nvme_host = std::min(n, host_free / compute);
        int64_t room = host_free;
        if (p.nvme_host < n) {
          // Compute payloads kept on the device are updated on the host through one more buffer
          // of a compute payload per rank (Note [nvme tier] in engine/chunked_engine.h).
          room -= compute;
          if (room < 0) return p;
          p.staging += compute;
          p.nvme_host = std::min(n, room / compute);
        }
        p.nvme_device = n - p.nvme_host;
        if (p.nvme_device * compute > device_free) return p;
        p.feasible = true;
        // The first nvme_host candidates compute on the host, the last nvme_device on the device;
        // the rest are placed whole, host first.
        p.homes.assign(static_cast<size_t>(owned.count()), Home::kHost);
        std::vector<bool> on_nvme(static_cast<size_t>(owned.count()), false);
        const auto num = static_cast<int64_t>(candidates.size());
        for (int64_t j = 0; j < p.nvme_host; ++j) {
          const auto i = static_cast<size_t>(candidates[static_cast<size_t>(j)]);
          p.homes[i] = Home::kHostNvme;
          on_nvme[i] = true;
        }
        for (int64_t j = num - p.nvme_device; j < num; ++j) {
          const auto i = static_cast<size_t>(candidates[static_cast<size_t>(j)]);
          p.homes[i] = Home::kDeviceNvme;
          on_nvme[i] = true;
        }
        std::vector<int64_t> rest;
        for (int64_t i = owned.pinned; i < owned.count(); ++i)
          if (!on_nvme[static_cast<size_t>(i)]) rest.push_back(i);
        const int64_t device_needs =
            split_whole(owned, rest, room - p.nvme_host * compute, whole, &p.homes);
        p.fits = device_needs <= device_free - p.nvme_device * compute;
        return p;
      };
      // Feasibility falls with n (the pool grows, then the compute payloads fill both tiers);
      // beyond the pool's size the room for the rest never falls with n (a chunk's compute payload
      // is at most the whole chunk it replaces), so both searches bisect.
      const auto movable = static_cast<int64_t>(candidates.size());
      int64_t lo = 0, hi = movable + 1;  // place(lo) feasible, place(hi) not (or past the end)
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (place(mid).feasible ? lo : hi) = mid;
      }
      const int64_t most = lo;
      int64_t chosen = -1;
      for (int64_t n = 1; n <= std::min(most, kNvmeStagingChunks - 1) && chosen < 0; ++n)
        if (place(n).fits) chosen = n;
      if (chosen < 0 && most >= kNvmeStagingChunks && place(most).fits) {
        int64_t bad = kNvmeStagingChunks - 1, good = most;
        while (good - bad > 1) {
          const int64_t mid = bad + (good - bad) / 2;
          (place(mid).fits ? good : bad) = mid;
        }
        chosen = good;
      }
      const NvmePlacement p = place(chosen >= 0 ? chosen : std::max<int64_t>(1, most));
      if (p.feasible) tally(p.homes);
      f.host_nvme_staging = r * p.staging;
      f.host_used = f.host_model + f.host_staging + f.host_nvme_staging;
      if (chosen < 0) {
        f.reason = str_cat(
            "model data needs ", format_bytes(model_data), " per rank (", f.owned_chunks, chunks_of,
            "); even with the optimizer payloads of ", most,
            " chunks on NVMe, the compute payloads (", format_bytes(compute),
            " per chunk) and the NVMe staging pool (", format_bytes(f.host_nvme_staging),
            " per host) leave the host and the device (room for ", format_bytes(device_free),
            ") short; raise the host or device memory, or train a smaller model");
      } else if (f.nvme_used > f.nvme_limit) {
        f.reason = str_cat("NVMe tier: the optimizer payloads of ", p.nvme, " chunks per rank (",
                           format_bytes(f.nvme_used), " per host, ", format_bytes(optimizer),
                           " per chunk) exceed what the plan may fill of the NVMe's ",
                           format_bytes(in.nvme_capacity), " (", kNvmeFillRatio * 100,
                           "%: ", format_bytes(f.nvme_limit),
                           "); use a larger NVMe disk, raise the host or device memory, or train "
                           "a smaller model");
      } else {
        f.reason.clear();
      }
    }
  }
  f.fits = f.reason.empty();
  return f;
}

}  // namespace pstar::plan
