#!/usr/bin/env python3
"""bench/gpu/hf_shape.py (the shape of the Hugging Face classes fsdp2_reference.py --model hf
trains) against pstar's own counts: for every published config.json in tests/data/hf_configs, the
parameters, the active parameters and the model FLOPs per token equal those of `pstar estimate
--model` for the preset of the same name (a mixture of experts' and Gemma 3's defaults included);
fewer layers equal pstar's preset with model.layers; and the config transformers builds from is a
wrapper's text part, with per-layer lists cut to the layers.

    tests/bench/hf_shape_test.py PSTAR
"""

import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import hf_shape  # noqa: E402

PSTAR = None
SEQ = 2048
HARDWARE = ["--hardware", "H100-80GB", "--cpu-mem", "4TB", "--nvme", "40TB", "--json",
            "--activation-checkpointing", "off"]


def estimate(*args):
    """pstar estimate's JSON (exit 5, does not fit, still prints it)."""
    r = subprocess.run([PSTAR, "estimate", *args, *HARDWARE], capture_output=True, text=True)
    if r.returncode not in (0, 5):
        raise AssertionError(f"pstar estimate {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def pstar_flops_per_token(e):
    # The estimate's TFLOPS are its model FLOPs a token (checkpointing off: no recomputation)
    # times its tokens per second.
    t = e["time"]
    return t["tflops_per_gpu"] * 1e12 / t["tokens_per_s"]


class HfShapeTest(unittest.TestCase):
    def expect_counts(self, c, e, what):
        m = e["model"]
        self.assertEqual(hf_shape.params(c), m["params"], what)
        self.assertEqual(hf_shape.params(c, active=True), m.get("active_params", m["params"]),
                         what)
        self.assertAlmostEqual(hf_shape.flops_per_token(c, SEQ) / pstar_flops_per_token(e), 1.0,
                               places=12, msg=what)

    def test_every_published_config_against_its_preset(self):
        files = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "hf_configs", "*.json")))
        self.assertGreaterEqual(len(files), 10)
        kinds = set()
        for path in files:
            name = os.path.splitext(os.path.basename(path))[0]
            with self.subTest(name):
                c = hf_shape.load(path)
                kinds.add(c["model_type"])
                self.expect_counts(c, estimate("--model", name, "--seq-len", str(SEQ)), name)
        self.assertTrue({"qwen3", "gemma3_text", "phi3", "mixtral", "qwen3_moe"} <= kinds, kinds)

    def test_fewer_layers_against_the_preset_with_model_layers(self):
        with tempfile.TemporaryDirectory() as d:
            for name, layers in (("qwen3-30b-a3b", 10), ("gemma-3-12b", 7)):
                with self.subTest(name):
                    config = os.path.join(d, name + ".json")
                    with open(config, "w") as f:
                        json.dump({"model": {"preset": name, "layers": layers, "seq_len": SEQ},
                                   "data": {"text": "corpus.txt"}}, f)
                    c = hf_shape.load(os.path.join(ROOT, "tests", "data", "hf_configs",
                                                   name + ".json"), layers)
                    self.assertEqual(c["num_hidden_layers"], layers)
                    self.expect_counts(c, estimate("--config", config), name)

    def test_the_text_part_and_lists_cut_to_the_layers(self):
        wrapper = {"model_type": "gemma3", "vision_config": {"hidden_size": 8},
                   "text_config": {"model_type": "gemma3_text", "hidden_size": 64,
                                   "intermediate_size": 128, "num_hidden_layers": 6,
                                   "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}}
        c = hf_shape.text_config(wrapper, layers=2)
        self.assertEqual(c["model_type"], "gemma3_text")
        self.assertEqual(c["layer_types"], ["sliding_attention"] * 2)
        self.assertNotIn("vision_config", c)
        self.assertEqual(c["vocab_size"], 262208)  # transformers' Gemma3TextConfig default
        self.assertEqual(wrapper["text_config"]["num_hidden_layers"], 6, "the input was changed")
        # Qwen3-MoE by hand: layer 1 dense through mlp_only_layers (kept: it is below 3 layers),
        # layer 4 dropped with the layers; 4 experts of width 8, top 2, hidden 16, 2 heads of 8.
        moe = {"model_type": "qwen3_moe", "hidden_size": 16, "intermediate_size": 32,
               "num_hidden_layers": 5, "num_attention_heads": 2, "num_key_value_heads": 1,
               "head_dim": 8, "vocab_size": 100, "num_experts": 4, "num_experts_per_tok": 2,
               "moe_intermediate_size": 8, "decoder_sparse_step": 1, "mlp_only_layers": [1, 4],
               "tie_word_embeddings": False}
        c = hf_shape.text_config(moe, layers=3)
        self.assertEqual(c["mlp_only_layers"], [1])
        self.assertEqual(hf_shape.sparse_layers(c), [True, False, True])
        attention = 2 * 16 * 16 + 2 * 16 * 8 + 2 * 8 + 2 * 16  # q, o; k, v; q/k norms; 2 norms
        dense, router, expert = 3 * 16 * 32, 16 * 4, 3 * 16 * 8
        ends = 100 * 16 + 16 + 100 * 16  # embedding, final norm, head
        self.assertEqual(hf_shape.params(c), 3 * attention + dense + 2 * (router + 4 * expert) + ends)
        self.assertEqual(hf_shape.params(c, active=True),
                         3 * attention + dense + 2 * (router + 2 * expert) + ends)
        with self.assertRaisesRegex(ValueError, "model_type 'qwen2_moe'"):
            hf_shape.text_config({"model_type": "qwen2_moe"})


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: hf_shape_test.py PSTAR")
    PSTAR = sys.argv.pop(1)
    unittest.main()
