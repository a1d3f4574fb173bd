#!/usr/bin/env python3
"""Writes a randomly initialised Llama-family model as a Hugging Face folder, for the GPU ledger's
"from a folder" runs (pstar's model.init_from) and the FSDP2 reference's shape (--hf-config).

  write_hf_llama.py --preset llama-3.1-8b --out DIR [--device cuda] [--shard-gb 5] [--config-only]
  write_hf_llama.py --list

DIR receives config.json (the preset's published Hugging Face fields) and, unless --config-only,
bf16 weights in shards of at most --shard-gb GB named as save_pretrained names them
(model.safetensors, or model-0000i-of-0000N.safetensors with model.safetensors.index.json), in Hugging Face's tensor
order: N(0, initializer_range) for matrices, 1 for norms. The values are drawn on --device (a GPU
draws 8B values in a second; the CPU takes minutes) and streamed to disk one tensor at a time, so
the host holds one tensor beyond the page cache. Prints one JSON line: bytes, seconds, GB/s.

The safetensors bytes are written by hand (an 8-byte little-endian header length, a JSON header,
the raw little-endian values), as examples/llama/make_tiny_llama.py does: torch and numpy only.
"""

import argparse
import json
import os
import struct
import sys
import time

import torch

# The published config.json fields of the presets the GPU ledger trains (the shapes of pstar's
# presets of the same names, docs/models.md; tests/bench/llama_reference_test.py checks the
# parameter counts against that table).
_LLAMA3 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
           "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001,
           "hidden_act": "silu", "initializer_range": 0.02, "max_position_embeddings": 131072,
           "mlp_bias": False, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
           "rope_theta": 500000.0, "vocab_size": 128256, "torch_dtype": "bfloat16"}


def _llama3(hidden, intermediate, layers, heads, tied, factor):
    c = dict(_LLAMA3)
    c.update({"hidden_size": hidden, "intermediate_size": intermediate,
              "num_hidden_layers": layers, "num_attention_heads": heads,
              "head_dim": hidden // heads, "tie_word_embeddings": tied,
              "rope_scaling": {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 8192}})
    return c


PRESETS = {
    "llama-3.2-1b": _llama3(2048, 8192, 16, 32, True, 32.0),
    "llama-3.2-3b": _llama3(3072, 8192, 28, 24, True, 32.0),
    "llama-3.1-8b": _llama3(4096, 14336, 32, 32, False, 8.0),
}


def tensor_specs(c):
    """(name, shape, is_norm) in Hugging Face's order: embedding, layers, final norm, head."""
    h, hd, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    specs = [("model.embed_tokens.weight", [c["vocab_size"], h], False)]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs += [(p + "input_layernorm.weight", [h], True),
                  (p + "self_attn.q_proj.weight", [q, h], False),
                  (p + "self_attn.k_proj.weight", [kv, h], False),
                  (p + "self_attn.v_proj.weight", [kv, h], False),
                  (p + "self_attn.o_proj.weight", [h, q], False),
                  (p + "post_attention_layernorm.weight", [h], True),
                  (p + "mlp.gate_proj.weight", [inter, h], False),
                  (p + "mlp.up_proj.weight", [inter, h], False),
                  (p + "mlp.down_proj.weight", [h, inter], False)]
    specs.append(("model.norm.weight", [h], True))
    if not c["tie_word_embeddings"]:
        specs.append(("lm_head.weight", [c["vocab_size"], h], False))
    return specs


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def plan_shards(specs, shard_bytes):
    """Consecutive tensors grouped into files of at most shard_bytes (a larger tensor alone)."""
    shards, current, size = [], [], 0
    for spec in specs:
        nbytes = 2 * numel(spec[1])
        if current and size + nbytes > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(spec)
        size += nbytes
    if current:
        shards.append(current)
    return shards


def write_shard(path, specs, c, device, generator):
    header, offset = {}, 0
    for name, shape, _ in specs:
        nbytes = 2 * numel(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape, is_norm in specs:
            if is_norm:
                t = torch.ones(shape, dtype=torch.bfloat16)
            else:
                t = torch.randn(shape, device=device, generator=generator)
                t = t.mul_(c["initializer_range"]).to(torch.bfloat16).cpu()
            f.write(t.view(torch.int16).numpy().data)  # x86 is little-endian, as the format
    os.replace(tmp, path)  # a folder never holds a half-written shard under its final name
    return offset


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--out", help="the folder to write (created if absent)")
    ap.add_argument("--device", default="cpu", help="where the values are drawn (cpu, cuda)")
    ap.add_argument("--shard-gb", type=float, default=5.0, help="largest shard in GB (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config-only", action="store_true", help="write config.json alone")
    ap.add_argument("--list", action="store_true", help="print the presets' configs and exit")
    a = ap.parse_args(argv)
    if a.list:
        print(json.dumps(PRESETS, indent=1))
        return 0
    if not a.preset or not a.out:
        ap.error("--preset and --out are required (or --list)")
    c = PRESETS[a.preset]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")
    if a.config_only:
        return 0
    start = time.monotonic()
    device = torch.device(a.device)
    generator = torch.Generator(device=device)
    generator.manual_seed(a.seed)
    shards = plan_shards(tensor_specs(c), int(a.shard_gb * 1e9))
    weight_map, total = {}, 0
    for i, specs in enumerate(shards):
        # save_pretrained's names: one file is model.safetensors, several are numbered.
        file = ("model.safetensors" if len(shards) == 1
                else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors")
        total += write_shard(os.path.join(a.out, file), specs, c, device, generator)
        weight_map.update({name: file for name, _, _ in specs})
        print(f"write_hf_llama: {file} ({i + 1}/{len(shards)})", file=sys.stderr, flush=True)
    if len(shards) > 1:
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    seconds = time.monotonic() - start
    print(json.dumps({"preset": a.preset, "out": a.out, "bytes": total, "shards": len(shards),
                      "seconds": seconds, "gb_per_s": total / seconds / 1e9}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
