#!/usr/bin/env python3
"""The machine's rates behind the step bound of gpt_bench.sh and llama_bench.sh (Note [step bound]
in libengine/include/pstar/train/step_bound.h): pinned copies host to device, device to host and
both at once on two streams, and host memory bandwidth (the faster of a copy between two host
tensors and a four-stream in-place op, on PyTorch's threads, bytes read plus bytes written). Each is the best of --repeats after one
untimed run: noise only ever adds time. Prints one JSON line (bytes per second).

  machine_rates.py [--copy-mib 1024] [--host-mib 2048] [--repeats 5] [--dry-run]

--dry-run (no GPU needed): host memory only; the copy rates are null.
"""

import argparse
import json
import sys
import time

import torch


def best_seconds(repeats, work):
    work()
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def copy_rates(n, repeats):
    host_a = torch.ones(n, dtype=torch.uint8).pin_memory()
    host_b = torch.zeros(n, dtype=torch.uint8).pin_memory()
    dev_a = torch.empty(n, dtype=torch.uint8, device="cuda")
    dev_b = torch.empty(n, dtype=torch.uint8, device="cuda")
    up, down = torch.cuda.Stream(), torch.cuda.Stream()

    def h2d():
        with torch.cuda.stream(up):
            dev_a.copy_(host_a, non_blocking=True)
        up.synchronize()

    def d2h():
        with torch.cuda.stream(down):
            host_b.copy_(dev_a, non_blocking=True)
        down.synchronize()

    def both():
        with torch.cuda.stream(up):
            dev_b.copy_(host_a, non_blocking=True)
        with torch.cuda.stream(down):
            host_b.copy_(dev_a, non_blocking=True)
        up.synchronize()
        down.synchronize()

    return {"h2d_bytes_per_s": n / best_seconds(repeats, h2d),
            "d2h_bytes_per_s": n / best_seconds(repeats, d2h),
            "two_way_bytes_per_s": 2 * n / best_seconds(repeats, both)}


def host_rate(n, repeats):
    # Note [host rate] in step_bound.h: the faster of a copy (read plus written bytes) and an
    # in-place op with four streams, as host Adam has (a, b and c read, a written: 16 bytes an
    # fp32 element, no line written that was not read).
    src = torch.ones(n, dtype=torch.uint8)
    dst = torch.zeros(n, dtype=torch.uint8)
    copy = 2 * n / best_seconds(repeats, lambda: dst.copy_(src))
    a, b, c = (torch.rand(n // 4) for _ in range(3))
    in_place = 4 * (n // 4) * 4 / best_seconds(repeats, lambda: a.addcmul_(b, c, value=1e-9))
    return max(copy, in_place)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--copy-mib", type=int, default=1024)
    p.add_argument("--host-mib", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    out = {"bench": "machine_rates", "torch_version": torch.__version__,
           "threads": torch.get_num_threads(), "copy_bytes": a.copy_mib << 20,
           "host_bytes": a.host_mib << 20, "h2d_bytes_per_s": None, "d2h_bytes_per_s": None,
           "two_way_bytes_per_s": None, "device_name": None, "dry_run": a.dry_run}
    if not a.dry_run:
        if not torch.cuda.is_available():
            print("machine_rates: no GPU (use --dry-run for host memory only)", file=sys.stderr)
            return 1
        out["device_name"] = torch.cuda.get_device_name()
        out.update(copy_rates(a.copy_mib << 20, a.repeats))
    out["host_memory_bytes_per_s"] = host_rate(a.host_mib << 20, a.repeats)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
