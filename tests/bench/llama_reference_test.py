#!/usr/bin/env python3
"""bench/gpu/llama_reference.py (the FSDP2 benchmark's Llama) against the forward pass of
examples/llama/make_tiny_llama.py, the Hugging Face-derived reference pstar's own Llama tests use:
the same weights must give the same logits, for Llama 3's shape (grouped-query attention, llama3
rope scaling, untied head) and a Qwen2-like one (tied head, no scaling); and the parameter count
read from the shape (biases included) must equal the modules' count.

Needs torch; exits 77 (ctest's SKIP_RETURN_CODE here) with the reason where it is missing."""

import importlib.util
import os
import sys
import unittest

try:
    import torch
except ImportError:
    print("skipped: this Python has no torch (Debian: apt-get install python3-torch)")
    sys.exit(77)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
import llama_reference  # noqa: E402
import llama_shape  # noqa: E402
import write_hf_llama  # noqa: E402


def load_tiny_llama():
    spec = importlib.util.spec_from_file_location(
        "make_tiny_llama", os.path.join(ROOT, "examples", "llama", "make_tiny_llama.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = load_tiny_llama()


def hf_config(**changes):
    c = dict(TINY.CONFIG)
    c.update(changes)
    c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    return c


class LlamaReferenceTest(unittest.TestCase):
    def check_logits(self, hf):
        c = llama_shape.read_config_dict(hf)
        torch.manual_seed(3)
        model = llama_reference.Llama(c, attention="math", checkpointing=False)
        with torch.no_grad():
            for name, p in model.named_parameters():
                # Norms away from 1 so that they matter. The example's forward has no biases:
                # they stay 0 (their count is checked below; nn.Linear applies them).
                if name.endswith(".bias"):
                    p.zero_()
                else:
                    p.copy_(0.1 * torch.randn_like(p) + (1.0 if p.dim() == 1 else 0.0))
        weights = {name: p.detach().clone() for name, p in model.named_parameters()
                   if not name.endswith(".bias")}
        ids = torch.randint(c["vocab_size"], (2, 19), generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            ours = model(ids)
        theirs = TINY.forward(hf, weights, ids)
        self.assertEqual(ours.shape, theirs.shape)
        err = (ours - theirs).norm() / theirs.norm()
        self.assertLess(err.item(), 1e-5, f"relative error {err.item():.3g}")

    def test_llama3_shape_matches_the_examples_forward(self):
        self.check_logits(hf_config())

    def test_qwen2_shape_with_a_tied_head_and_no_rope_scaling(self):
        self.check_logits(hf_config(model_type="qwen2", tie_word_embeddings=True,
                                    rope_scaling=None, rope_theta=10000.0))

    def test_parameter_count_from_the_shape(self):
        for hf in (hf_config(), hf_config(model_type="qwen2", tie_word_embeddings=True),
                   hf_config(attention_bias=True, mlp_bias=True)):
            c = llama_shape.read_config_dict(hf)
            model = llama_reference.Llama(c, device="meta")
            self.assertEqual(sum(p.numel() for p in model.parameters()),
                             llama_shape.expected_params(c), hf)

    def test_config_errors_name_the_problem(self):
        with self.assertRaisesRegex(ValueError, "model_type 'gpt2'"):
            llama_shape.read_config_dict({"model_type": "gpt2"})
        with self.assertRaisesRegex(ValueError, "missing vocab_size"):
            bad = hf_config()
            del bad["vocab_size"]
            llama_shape.read_config_dict(bad)


class WriteHfLlamaTest(unittest.TestCase):
    def test_presets_have_the_parameter_counts_of_pstars_presets(self):
        # docs/models.md's preset table, written from pstar's own counts.
        with open(os.path.join(ROOT, "docs", "models.md")) as f:
            rows = {}
            for line in f:
                cells = [x.strip() for x in line.split("|")]
                if len(cells) > 3 and cells[1].startswith("`"):
                    rows[cells[1].strip("`")] = cells[-2].replace(",", "")
        for name, hf in write_hf_llama.PRESETS.items():
            c = llama_shape.read_config_dict(hf)
            self.assertEqual(str(llama_shape.expected_params(c)), rows[name], name)

    def test_a_written_folder_holds_the_examples_tensors(self):
        import json
        import struct
        import tempfile
        hf = hf_config()
        want = dict((name, shape) for name, shape in TINY.parameter_shapes(hf))
        specs = write_hf_llama.tensor_specs(hf)
        self.assertEqual([s[0] for s in specs], [name for name, _ in TINY.parameter_shapes(hf)])
        shards = write_hf_llama.plan_shards(specs, 40000)
        self.assertGreater(len(shards), 1)
        with tempfile.TemporaryDirectory() as d:
            seen = {}
            gen = torch.Generator().manual_seed(0)
            for i, part in enumerate(shards):
                path = os.path.join(d, f"shard{i}")
                total = write_hf_llama.write_shard(path, part, hf, torch.device("cpu"), gen)
                with open(path, "rb") as f:
                    n = struct.unpack("<Q", f.read(8))[0]
                    header = json.loads(f.read(n))
                    data = f.read()
                self.assertEqual(len(data), total)
                for name, info in header.items():
                    if name == "__metadata__":
                        continue
                    lo, hi = info["data_offsets"]
                    t = torch.frombuffer(bytearray(data[lo:hi]), dtype=torch.bfloat16)
                    seen[name] = (info["shape"], t.float())
        self.assertEqual({k: v[0] for k, v in seen.items()}, want)
        self.assertTrue(torch.equal(seen["model.norm.weight"][1], torch.ones(hf["hidden_size"])))
        emb = seen["model.embed_tokens.weight"][1]
        self.assertAlmostEqual(emb.std().item(), hf["initializer_range"], delta=0.002)
        self.assertLess(abs(emb.mean().item()), 0.002)


if __name__ == "__main__":
    unittest.main()
