#!/usr/bin/env python3
"""Where a traced training step spends its time: a summary of Chrome traces from PyTorch's
profiler (Kineto), as `pstar train` writes with PSTAR_TORCH_TRACE (docs/cuda.md, Note [torch
trace]) and fsdp2_reference.py --trace writes for the PyTorch reference.

  trace_summary.py TRACE [TRACE ...] [--top N] [--json OUT]

For each trace: the traced span, the GPU's busy time (kernels, copies and memsets of every
stream, overlaps counted once) and so its idle share, kernel time by kind (matrix products,
attention, normalisation, elementwise, ...), the top kernels, copies by direction with their
rates, CUDA runtime calls (the synchronising ones are what hold the host), the longest host
operators, and the longest gaps in the GPU's work with what the host was doing during each. Given
two or more traces, a table puts their kernel kinds side by side. Standard library only; a trace
may be gzipped.
"""

import argparse
import gzip
import json
import re
import sys

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
# First match wins: the order puts specific kinds before the generic ones.
KERNEL_KINDS = [
    ("attention", r"flash|fmha|attention|sdpa"),
    ("softmax/loss", r"softmax|nll_loss|cross_entropy"),
    ("matmul", r"gemm|cutlass|xmma|nvjet|cublas|wgmma|sm90_|splitk|matmul"),
    ("layer_norm", r"layer_norm|layernorm|rms_norm"),
    ("adam", r"adam|multi_tensor_apply"),
    ("reduce", r"reduce|sum_kernel|norm_kernel"),
    ("copy/cast", r"copy|cast|convert|to_copy|cat_|transpose"),
    ("fill", r"fill|zero"),
    ("embedding", r"embedding|index|gather|scatter"),
    ("elementwise", r"elementwise|vectorized|unrolled|gelu|activation|add|mul"),
]


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events
            if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))
            and isinstance(e.get("ts"), (int, float))]


def category(e):
    return str(e.get("cat", "")).lower()


def union(intervals):
    """Merged [start, end) intervals, sorted."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def kernel_kind(name):
    low = name.lower()
    for kind, pattern in KERNEL_KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def tally(events, key):
    out = {}
    for e in events:
        k = key(e)
        row = out.setdefault(k, {"count": 0, "us": 0.0, "bytes": 0})
        row["count"] += 1
        row["us"] += e["dur"]
        row["bytes"] += int((e.get("args") or {}).get("bytes", 0) or 0)
    return out


def overlap(a_start, a_end, b_start, b_end):
    return max(0.0, min(a_end, b_end) - max(a_start, b_start))


def summarise(path, top):
    events = load(path)
    if not events:
        raise SystemExit(f"trace_summary: {path} holds no complete ('X') events")
    gpu = [e for e in events if category(e) in GPU_CATEGORIES]
    kernels = [e for e in gpu if category(e) == "kernel"]
    copies = [e for e in gpu if category(e) == "gpu_memcpy"]
    calls = [e for e in events if category(e) in HOST_CALL_CATEGORIES]
    # Traces from a profiler without Kineto name no category: their events are host operators.
    host_ops = [e for e in events if category(e) in ("cpu_op", "user_annotation", "")]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    busy = union((e["ts"], e["ts"] + e["dur"]) for e in gpu)
    busy_us = sum(b - a for a, b in busy)
    gaps = []
    if busy:
        edges = [(start, busy[0][0])] + [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
        edges.append((busy[-1][1], end))
        gaps = sorted(((b - a, a, b) for a, b in edges if b > a), reverse=True)[:top]
    gap_rows = []
    for length, a, b in gaps:
        during = sorted(((overlap(a, b, e["ts"], e["ts"] + e["dur"]), e["name"])
                         for e in calls + host_ops), reverse=True)
        names, seen = [], set()
        for us, name in during:
            if us <= 0 or name in seen:
                continue
            seen.add(name)
            names.append({"name": name, "us": round(us, 1)})
            if len(names) == 3:
                break
        gap_rows.append({"start_us": round(a - start, 1), "us": round(length, 1), "host": names})
    kinds = tally(kernels, lambda e: kernel_kind(e["name"]))
    names = tally(kernels, lambda e: e["name"])
    return {
        "trace": path,
        "span_ms": (end - start) / 1e3,
        "gpu_busy_ms": busy_us / 1e3,
        "gpu_idle_share": 1.0 - busy_us / (end - start) if end > start else None,
        "kernel_ms": sum(e["dur"] for e in kernels) / 1e3,
        "kernels": len(kernels),
        "kernel_kinds": {k: {"count": v["count"], "ms": v["us"] / 1e3} for k, v in kinds.items()},
        "top_kernels": [{"name": k, "count": v["count"], "ms": v["us"] / 1e3}
                        for k, v in sorted(names.items(), key=lambda kv: -kv[1]["us"])[:top]],
        "copies": [{"name": k, "count": v["count"], "ms": v["us"] / 1e3, "bytes": v["bytes"],
                    "gb_per_s": v["bytes"] / (v["us"] * 1e3) if v["us"] > 0 else None}
                   for k, v in sorted(tally(copies, lambda e: e["name"]).items(),
                                      key=lambda kv: -kv[1]["us"])],
        "host_calls": [{"name": k, "count": v["count"], "ms": v["us"] / 1e3}
                       for k, v in sorted(tally(calls, lambda e: e["name"]).items(),
                                          key=lambda kv: -kv[1]["us"])[:top]],
        "host_ops": [{"name": k, "count": v["count"], "ms": v["us"] / 1e3}
                     for k, v in sorted(tally(host_ops, lambda e: e["name"]).items(),
                                        key=lambda kv: -kv[1]["us"])[:top]],
        "gpu_gaps": gap_rows,
    }


def short(name, width=90):
    return name if len(name) <= width else name[:width - 3] + "..."


def print_summary(s, out):
    idle = s["gpu_idle_share"]
    out.write(f"== {s['trace']}\n")
    out.write(f"span {s['span_ms']:.1f} ms; GPU busy {s['gpu_busy_ms']:.1f} ms "
              f"(idle {100 * idle:.1f}%); {s['kernels']} kernels, {s['kernel_ms']:.1f} ms\n")
    out.write("kernel time by kind (ms, count):\n")
    for kind, v in sorted(s["kernel_kinds"].items(), key=lambda kv: -kv[1]["ms"]):
        out.write(f"  {kind:<12} {v['ms']:9.2f} {v['count']:7d}\n")
    def rows(title, items):
        out.write(f"{title} (ms, count):\n")
        for r in items:
            out.write(f"  {r['ms']:9.2f} {r['count']:6d}  {short(r['name'])}\n")

    rows("top kernels", s["top_kernels"])
    out.write("copies (ms, count, MB, GB/s):\n")
    for c in s["copies"]:
        rate = f"{c['gb_per_s']:.1f}" if c["gb_per_s"] else "-"
        out.write(f"  {c['ms']:9.2f} {c['count']:6d} {c['bytes'] / 1e6:10.1f} {rate:>7}  "
                  f"{c['name']}\n")
    rows("CUDA runtime/driver calls on the host", s["host_calls"])
    rows("host operators, inclusive", s["host_ops"])
    out.write("longest GPU gaps (at ms into the span: length; what the host was in):\n")
    for g in s["gpu_gaps"]:
        host = ", ".join(f"{h['name']} {h['us'] / 1e3:.2f}" for h in g["host"]) or "-"
        out.write(f"  at {g['start_us'] / 1e3:8.2f}: {g['us'] / 1e3:7.2f} ms; {short(host, 110)}\n")


def print_comparison(summaries, out):
    kinds = sorted({k for s in summaries for k in s["kernel_kinds"]},
                   key=lambda k: -max(s["kernel_kinds"].get(k, {"ms": 0})["ms"] for s in summaries))
    out.write("== kernel time by kind, side by side (ms)\n")
    out.write(f"  {'kind':<12}" + "".join(f" {i + 1:>10}" for i in range(len(summaries))) + "\n")
    for k in kinds + ["(all)", "(GPU busy)", "(span)"]:
        if k == "(all)":
            vals = [s["kernel_ms"] for s in summaries]
        elif k == "(GPU busy)":
            vals = [s["gpu_busy_ms"] for s in summaries]
        elif k == "(span)":
            vals = [s["span_ms"] for s in summaries]
        else:
            vals = [s["kernel_kinds"].get(k, {"ms": 0.0})["ms"] for s in summaries]
        out.write(f"  {k:<12}" + "".join(f" {v:10.2f}" for v in vals) + "\n")
    for i, s in enumerate(summaries):
        out.write(f"  {i + 1}: {s['trace']}\n")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+")
    p.add_argument("--top", type=int, default=15, help="rows per list (default 15)")
    p.add_argument("--json", help="also write the summaries as JSON to this file")
    a = p.parse_args(argv)
    summaries = [summarise(path, a.top) for path in a.traces]
    for s in summaries:
        print_summary(s, sys.stdout)
    if len(summaries) > 1:
        print_comparison(summaries, sys.stdout)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summaries, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
