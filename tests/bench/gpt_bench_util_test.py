#!/usr/bin/env python3
"""bench/gpu/gpt_bench_util.py's row and run_measure.py's host peak for runs on several GPUs
(gpt_bench.sh --nproc): the row counts every rank's micro-batch in tokens/s and divides TFLOPS
by the GPUs, host Adam's bound term counts the node's ranks, and the host peak of a command of
several processes is their sum, which getrusage alone (the largest child) would miss."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import run_measure  # noqa: E402

UTIL = os.path.join(ROOT, "bench", "gpu", "gpt_bench_util.py")
HIDDEN, LAYERS, VOCAB, SEQ, BATCH = 64, 2, 1000, 32, 4


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def row(d, nproc, rates=None):
    args = [sys.executable, UTIL, "row", d, "--hidden", str(HIDDEN), "--layers", str(LAYERS),
            "--vocab", str(VOCAB), "--seq", str(SEQ), "--micro-batch", str(BATCH), "--skip", "1",
            "--nproc", str(nproc)]
    if rates:
        args += ["--rates", rates]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout), out.stderr


class RowOnSeveralGpusTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        h = HIDDEN
        self.params = LAYERS * (12 * h * h + 13 * h) + VOCAB * h + SEQ * h + 2 * h
        self.fpt = 6 * self.params + 12 * LAYERS * h * SEQ
        # Rank 0's metrics: a warm-up step, then steps of 2 s and 4 s (mean 3 s); Adam of 6 GB
        # each on this rank.
        steps = [{"step": i + 1, "step_time_s": t, "loss": 5.0, "tokens": (i + 1) * 2 * BATCH * SEQ,
                  "moved_h2d_bytes": 0, "moved_d2h_bytes": 0, "adam_host_bytes": 6e9}
                 for i, t in enumerate((9.0, 2.0, 4.0))]
        write(os.path.join(d, "pstar.metrics.jsonl"), "".join(json.dumps(s) + "\n" for s in steps))
        write(os.path.join(d, "pstar.measure.json"), json.dumps(
            {"exit_code": 0, "timed_out": False, "wall_s": 20.0, "host_peak_bytes": 8 * self.params,
             "gpu_used_peak_bytes": None}))
        write(os.path.join(d, "pstar.log"),
              f"[pstar r0] model: x parameters ({self.params}), vocab {VOCAB}\n")
        # The reference prints tokens/s of its global batch already (fsdp2_reference.py).
        write(os.path.join(d, "fsdp2.json"), json.dumps(
            {"impl": "fsdp2-offload-fused", "params": self.params, "tokens_per_s": 2 * BATCH * SEQ / 6.0,
             "tflops": 1.0, "host_peak_bytes": 16 * self.params, "host_bytes_per_param": 16.0,
             "s_per_step": 6.0, "dry_run": False}) + "\n")
        write(os.path.join(d, "fsdp2.measure.json"), json.dumps(
            {"exit_code": 0, "timed_out": False, "wall_s": 30.0, "host_peak_bytes": 16 * self.params,
             "gpu_used_peak_bytes": None}))
        self.rates = os.path.join(d, "rates.json")
        write(self.rates, json.dumps({"host_memory_bytes_per_s": 4e9}))

    def tearDown(self):
        self.dir.cleanup()

    def test_tokens_count_every_rank_and_tflops_are_per_gpu(self):
        r, err = row(self.dir.name, 2)
        self.assertEqual(r["nproc"], 2)
        p = r["pstar"]
        self.assertAlmostEqual(p["s_per_step"], 3.0)
        self.assertAlmostEqual(p["tokens_per_s"], 2 * BATCH * SEQ / 3.0)
        self.assertAlmostEqual(p["tflops"], self.fpt * BATCH * SEQ / 3.0 / 1e12)
        self.assertAlmostEqual(r["ratio_vs_fsdp2"], 2.0)
        self.assertIn("TFLOPS/GPU", err)

    def test_one_gpu_is_unchanged(self):
        r, err = row(self.dir.name, 1)
        self.assertAlmostEqual(r["pstar"]["tokens_per_s"], BATCH * SEQ / 3.0)
        self.assertAlmostEqual(r["pstar"]["tflops"], self.fpt * BATCH * SEQ / 3.0 / 1e12)
        self.assertNotIn("TFLOPS/GPU", err)

    def test_host_adam_bound_counts_the_ranks_sharing_the_host(self):
        one, _ = row(self.dir.name, 1, self.rates)
        two, _ = row(self.dir.name, 2, self.rates)
        self.assertAlmostEqual(one["bound"]["steps"][0]["host_s"], 1.5)  # 6 GB at 4 GB/s
        self.assertAlmostEqual(two["bound"]["steps"][0]["host_s"], 3.0)  # both ranks' 12 GB
        self.assertEqual(two["bound"]["ranks_per_host"], 2)
        self.assertAlmostEqual(two["bound"]["steps"][1]["ratio"], 4.0 / 3.0)


# Each child writes MIB mebibytes (resident) and holds them for a second and a half.
CHILD = ("import sys, time; b = bytearray(b'\\x01') * ({mib} << 20); "
         "time.sleep(1.5)")


class HostPeakOfSeveralProcessesTest(unittest.TestCase):
    def test_children_held_at_once_are_added_up(self):
        mib = 96
        parent = (f"import subprocess, sys; code = {CHILD.format(mib=mib)!r}; "
                  "kids = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(2)]; "
                  "sys.exit(max(k.wait() for k in kids))")
        result = run_measure.measure([sys.executable, "-c", parent])
        self.assertEqual(result["exit_code"], 0)
        both = 2 * (mib << 20)
        # The largest child alone holds one buffer; the sampled sum holds both (and the parent).
        self.assertLess(result["host_largest_process_peak_bytes"], both)
        self.assertGreaterEqual(result["host_sampled_peak_bytes"], both)
        self.assertEqual(result["host_peak_bytes"], result["host_sampled_peak_bytes"])

    def test_one_process_keeps_its_own_high_water_mark(self):
        result = run_measure.measure([sys.executable, "-c", CHILD.format(mib=64)])
        self.assertGreaterEqual(result["host_largest_process_peak_bytes"], 64 << 20)
        self.assertGreaterEqual(result["host_peak_bytes"], result["host_largest_process_peak_bytes"])

    def test_stat_lines_whose_command_names_hold_parentheses(self):
        page = os.sysconf("SC_PAGE_SIZE")
        with tempfile.TemporaryDirectory() as proc:
            def stat(pid, comm, session, rss_pages):
                os.mkdir(os.path.join(proc, str(pid)))
                # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
                # utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss
                fields = ["S", "1", "1", str(session)] + ["0"] * 16 + ["4096", str(rss_pages)]
                write(os.path.join(proc, str(pid), "stat"), f"{pid} ({comm}) " + " ".join(fields))
            stat(10, "pstar", 10, 100)
            stat(11, "a) b (c", 10, 50)  # a name that ends in ") " part-way
            stat(12, "other", 99, 1000)  # another session
            os.mkdir(os.path.join(proc, "self"))
            self.assertEqual(run_measure.session_rss_bytes(10, proc), 150 * page)


if __name__ == "__main__":
    unittest.main()
