#!/usr/bin/env python3
"""bench/gpu/trace_summary.py against a hand-made Kineto-style trace whose figures are worked out
by hand below: two streams that overlap, a copy with its byte count, and a host that synchronises
while the GPU has nothing to do."""

import gzip
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import trace_summary  # noqa: E402


def event(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7,
            "args": args}


# Times in microseconds. GPU: a gemm [100, 400) on one stream, an elementwise kernel [300, 500)
# on another (busy [100, 500) = 400 us), then a host-to-device copy of 2 MB [900, 1000) and a
# flash-attention kernel [1000, 1100): busy 600 us over the span [0, 1200).
# Gaps: [0, 100) 100 us, [500, 900) 400 us, [1100, 1200) 100 us. The host synchronises over
# [450, 950), so the 400 us gap is cudaStreamSynchronize's (400 us of it overlaps).
EVENTS = [
    event("cpu_op", "aten::mm", 0, 150),
    event("cuda_runtime", "cudaLaunchKernel", 10, 5),
    event("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", 100, 300),
    event("kernel", "void at::native::vectorized_elementwise_kernel<add>", 300, 200),
    event("cuda_runtime", "cudaStreamSynchronize", 450, 500),
    event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 900, 100, bytes=2_000_000),
    event("kernel", "flash_fwd_kernel", 1000, 100),
    event("cpu_op", "aten::copy_", 1100, 100),
    {"ph": "i", "name": "an instant event, ignored", "ts": 5000},
]


class TraceSummaryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "t.json.gz")
        with gzip.open(self.path, "wt") as f:
            json.dump({"traceEvents": EVENTS}, f)

    def tearDown(self):
        self.dir.cleanup()

    def test_busy_time_counts_overlapping_streams_once(self):
        s = trace_summary.summarise(self.path, top=5)
        self.assertAlmostEqual(s["span_ms"], 1.2)
        self.assertAlmostEqual(s["gpu_busy_ms"], 0.6)
        self.assertAlmostEqual(s["gpu_idle_share"], 0.5)
        self.assertAlmostEqual(s["kernel_ms"], 0.6)  # 300 + 200 + 100 us, overlap not merged
        self.assertEqual(s["kernels"], 3)

    def test_kernels_are_sorted_into_kinds(self):
        kinds = trace_summary.summarise(self.path, top=5)["kernel_kinds"]
        self.assertAlmostEqual(kinds["matmul"]["ms"], 0.3)
        self.assertAlmostEqual(kinds["elementwise"]["ms"], 0.2)
        self.assertAlmostEqual(kinds["attention"]["ms"], 0.1)

    def test_copies_report_bytes_and_rate(self):
        (copy,) = trace_summary.summarise(self.path, top=5)["copies"]
        self.assertEqual(copy["bytes"], 2_000_000)
        self.assertAlmostEqual(copy["gb_per_s"], 20.0)  # 2 MB in 100 us

    def test_the_longest_gap_names_the_synchronising_call(self):
        gaps = trace_summary.summarise(self.path, top=5)["gpu_gaps"]
        self.assertEqual([g["us"] for g in gaps], [400.0, 100.0, 100.0])
        self.assertEqual(gaps[0]["start_us"], 500.0)
        self.assertEqual(gaps[0]["host"][0], {"name": "cudaStreamSynchronize", "us": 400.0})

    def test_main_prints_a_comparison_for_two_traces(self):
        out_json = os.path.join(self.dir.name, "s.json")
        self.assertEqual(trace_summary.main([self.path, self.path, "--json", out_json]), 0)
        with open(out_json) as f:
            self.assertEqual(len(json.load(f)), 2)


if __name__ == "__main__":
    unittest.main()
