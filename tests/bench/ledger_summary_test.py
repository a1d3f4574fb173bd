#!/usr/bin/env python3
"""bench/gpu/ledger_summary.py (the GPU ledger's summaries) on hand-made phase records and
benchmark rows: the record keeps each run's figures, compares tokens/s with the newest earlier
record of the same card only, and lists a drop of more than 5% as a regression."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "gpu", "ledger_summary.py")
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import ledger_summary  # noqa: E402


def row(hidden, layers, pstar_tok, fsdp2_tok=None):
    pstar = {"tokens_per_s": pstar_tok, "tflops": pstar_tok / 10, "s_per_step_median": 2.0,
             "s_per_step_min": 1.9, "s_per_step_max": 2.2, "setup_s": 30.5, "step1_s": 12.0,
             "host_bytes_per_param": 15.0, "split_s_per_step": {"forward_s": 0.5}}
    fsdp2 = None if fsdp2_tok is None else {"tokens_per_s": fsdp2_tok, "tflops": fsdp2_tok / 10}
    return {"model": "gpt", "hidden": hidden, "layers": layers, "params": 7.46e9, "pstar": pstar,
            "fsdp2": fsdp2, "plain": None,
            "ratio_vs_fsdp2": None if fsdp2_tok is None else pstar_tok / fsdp2_tok}


class ClippedAgainstTest(unittest.TestCase):
    # Issue 56: each clipped run's median step over the unclipped one of its model; runs missing
    # either side are left out.
    def test_ratios(self):
        auto = row(4096, 36, 3000)
        auto["pstar"] = dict(auto["pstar"], s_per_step_median=2.1)
        lines = ledger_summary.clipped_lines({"gpt7b": [row(4096, 36, 3700)], "gpt7bauto": [auto],
                                              "llama8b": [row(4096, 32, 3000)]})
        self.assertEqual(lines[-1], "| gpt7bauto | gpt7b | 2.100 | 2.000 | 1.050 |")
        self.assertEqual(len(lines), 4)
        self.assertEqual(ledger_summary.clipped_lines({"gpt7b": [row(4096, 36, 1)]}), [])


class LedgerSummaryTest(unittest.TestCase):
    def run_summary(self, repo, card, rows, phases):
        out, work = tempfile.mkdtemp(dir=repo), tempfile.mkdtemp(dir=repo)
        with open(os.path.join(work, "environment.json"), "w") as f:
            json.dump({"card": card, "driver": "580", "torch": "2.11.0", "cuda": "13.0"}, f)
        with open(os.path.join(out, "phases.jsonl"), "w") as f:
            for p in phases:
                f.write(json.dumps(p) + "\n")
        for name, r in rows.items():
            with open(os.path.join(work, name + ".jsonl"), "w") as f:
                f.write(json.dumps(r) + "\n")
        with open(os.path.join(out, "gpu-ctest.txt"), "w") as f:
            f.write("98% tests passed, 1 tests failed out of 62\n\nThe following tests FAILED:\n"
                    "\t 12 - CudaTraining.Tight (Failed)\n")
        env = dict(os.environ, PSTAR_COMMIT="abc123")
        subprocess.run([sys.executable, SCRIPT, "--out", out, "--work", work, "--repo", repo,
                        "--seconds", "321"], check=True, env=env, capture_output=True)
        with open(os.path.join(out, "result.json")) as f:
            return out, json.load(f)

    def test_record_and_regressions_against_the_same_card_only(self):
        with tempfile.TemporaryDirectory() as repo:
            os.makedirs(os.path.join(repo, "bench", "results"))
            phases = [{"phase": "build", "status": "passed", "seconds": 150},
                      {"phase": "gpt7b", "status": "passed", "seconds": 280},
                      {"phase": "llama8b", "status": "skipped", "seconds": 0}]
            _, first = self.run_summary(repo, "NVIDIA H100 80GB HBM3",
                                        {"gpt7b": row(4096, 36, 3700, 2100)}, phases)
            self.assertIsNone(first["compared"])
            self.assertEqual(first["commit"], "abc123")
            self.assertEqual(first["gpu_tests"]["total"], 62)
            self.assertEqual(first["gpu_tests"]["passed"], 61)
            self.assertEqual(first["gpu_tests"]["failed"], ["CudaTraining.Tight (Failed)"])
            self.assertEqual(first["runs"]["gpt7b"]["pstar"]["setup_s"], 30.5)
            self.assertAlmostEqual(first["runs"]["gpt7b"]["ratio_vs_fsdp2"], 3700 / 2100)
            self.assertEqual(first["phases"]["llama8b"]["status"], "skipped")
            with open(os.path.join(repo, "bench", "results", "2026-11-27-H100.json"), "w") as f:
                json.dump(first, f)
            # An H200 record, newer, with much higher figures: not the same card, never compared.
            h200 = dict(first, card="NVIDIA H200", date="2026-11-28")
            h200["runs"] = {"gpt7b": row(4096, 36, 9000, 9000)}
            with open(os.path.join(repo, "bench", "results", "2026-11-28-H200.json"), "w") as f:
                json.dump(h200, f)

            out, second = self.run_summary(repo, "NVIDIA H100 PCIe",
                                           {"gpt7b": row(4096, 36, 3400, 2090)}, phases)
            self.assertEqual(second["compared"]["against"],
                             os.path.join("bench", "results", "2026-11-27-H100.json"))
            by_side = {c["side"]: c for c in second["compared"]["changes"]}
            self.assertAlmostEqual(by_side["pstar"]["ratio"], 3400 / 3700)
            self.assertAlmostEqual(by_side["fsdp2"]["ratio"], 2090 / 2100)
            # pstar fell by 8%: a regression; FSDP2 by 0.5%: not.
            self.assertEqual([(r["run"], r["side"]) for r in second["regressions"]],
                             [("gpt7b", "pstar")])
            with open(os.path.join(out, "summary.md")) as f:
                md = f.read()
            self.assertIn("| gpt7b | gpt 4096x36 |", md)
            self.assertIn("2.000 (1.900-2.200)", md)
            self.assertIn("| llama8b | skipped |", md)

    def test_card_names_shorten_to_the_chip(self):
        self.assertEqual(ledger_summary.card_key("NVIDIA H100 80GB HBM3"), "H100")
        self.assertEqual(ledger_summary.card_key("NVIDIA H200"), "H200")
        self.assertEqual(ledger_summary.card_key(None), "unknown")


if __name__ == "__main__":
    unittest.main()
