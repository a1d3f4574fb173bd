#!/usr/bin/env python3
"""bench/gpu/step_bound.py (Note [step bound] for gpt_bench.sh's rows) on hand-made steps and
rates: each term is its work over its rate, the copies take the slower of one direction alone and
both at once, a rate not measured leaves its term out, and the ratio is step over the largest."""

import os
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import step_bound  # noqa: E402

RATES = {"h2d_bytes_per_s": 50e9, "d2h_bytes_per_s": 40e9, "two_way_bytes_per_s": 80e9,
         "host_memory_bytes_per_s": 20e9}


class StepBoundTest(unittest.TestCase):
    def test_terms_by_hand(self):
        step = {"step": 3, "step_time_s": 3.0, "moved_h2d_bytes": 30e9, "moved_d2h_bytes": 20e9,
                "adam_host_bytes": 10e9, "grad_norm_host_bytes": 2e9}
        b = step_bound.figures([step], RATES, 150e12, 100e12, "plain")
        s = b["steps"][0]
        self.assertAlmostEqual(s["compute_s"], 1.5)
        self.assertAlmostEqual(s["copy_s"], 0.625)  # 50 GB both ways at 80 GB/s beats 0.6 s up
        # 10 GB of Adam, 2 GB of the norm's reads and 50 GB of copies at 20 GB/s
        self.assertAlmostEqual(s["host_s"], 3.1)
        self.assertAlmostEqual(s["bound_s"], 3.1)
        self.assertEqual(s["limit"], "host memory")
        self.assertAlmostEqual(s["ratio"], 3.0 / 3.1)
        self.assertAlmostEqual(b["ratio_median"], 3.0 / 3.1)
        self.assertEqual(b["model_flops_rate_source"], "plain")

    def test_one_direction_alone_can_be_the_slower(self):
        step = {"step_time_s": 1.0, "moved_h2d_bytes": 40e9, "moved_d2h_bytes": 0,
                "adam_host_bytes": 0}
        # Host memory at 100 GB/s: the copies' 40 GB there take 0.4 s, less than the link's 0.8.
        s = step_bound.figures([step], dict(RATES, host_memory_bytes_per_s=100e9), 0, 100e12,
                               "plain")["steps"][0]
        self.assertAlmostEqual(s["copy_s"], 0.8)
        self.assertAlmostEqual(s["host_s"], 0.4)
        self.assertEqual(s["limit"], "copies")

    def test_unmeasured_rates_leave_their_terms_out(self):
        step = {"step_time_s": 2.0, "moved_h2d_bytes": 1e9, "moved_d2h_bytes": 1e9,
                "adam_host_bytes": 4e9}
        b = step_bound.figures([step], {"host_memory_bytes_per_s": 4e9}, 1e12, None, None)
        s = b["steps"][0]
        self.assertIsNone(s["compute_s"])
        self.assertIsNone(s["copy_s"])
        self.assertAlmostEqual(s["host_s"], 1.5)  # 4 GB of Adam and 2 GB of copies at 4 GB/s
        self.assertEqual(s["limit"], "host memory")
        self.assertAlmostEqual(b["ratio_median"], 2.0 / 1.5)

    def test_nothing_to_hold_against(self):
        self.assertIsNone(step_bound.figures([], RATES, 1.0, 1.0, "plain"))
        self.assertIsNone(step_bound.figures([{"step_time_s": 1.0}], None, 1.0, None, None))

    def test_median_over_steps_and_lines(self):
        steps = [{"step": i, "step_time_s": t, "moved_h2d_bytes": 0, "moved_d2h_bytes": 0,
                  "adam_host_bytes": 0} for i, t in ((3, 1.0), (4, 3.0), (5, 2.0))]
        b = step_bound.figures(steps, RATES, 100e12, 100e12, "plain-rate")
        self.assertAlmostEqual(b["ratio_median"], 2.0)
        lines = step_bound.lines("[x]", b)
        self.assertEqual(len(lines), 3)
        self.assertIn("step 4: 3.000 s = 3.00 x the bound 1.000 s", lines[1])


if __name__ == "__main__":
    unittest.main()
