#!/usr/bin/env python3
"""Writes a tiny Llama-family model as a Hugging Face folder, with nothing but PyTorch.

    python3 examples/llama/make_tiny_llama.py --out DIR [--shards 2] [--dtype bf16]
        [--seed 0] [--reference] [--hidden H --layers L --heads A --kv-heads K
        --intermediate I --vocab V --max-positions P]

DIR receives config.json and the weights as Hugging Face's save_pretrained lays them out: one
model.safetensors, or with --shards N > 1 the files model-0000i-of-0000N.safetensors and
model.safetensors.index.json. The safetensors files are written by hand (an 8-byte little-endian
header length, a JSON header, the raw little-endian bytes), so no `safetensors` or `transformers`
package is needed: Debian's python3-torch is enough.

The shape options replace the tiny default's fields (hidden 64, 2 layers, 4/2 heads, SwiGLU 176,
vocabulary 256), e.g. for a folder of a few hundred MB to measure loading with.

--reference also writes DIR/reference.json: token ids and the mean cross-entropy of predicting
each next token, computed by this script's own forward pass (written from Hugging Face's
LlamaForCausalLM: RMSNorm in fp32, rotary embeddings with llama3 scaling, grouped-query attention,
SwiGLU) in fp32 from the stored weights. pstar's tests load the folder and compare.
"""

import argparse
import json
import math
import os
import struct

import torch

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
}

DTYPES = {"bf16": (torch.bfloat16, "BF16", "bfloat16"), "fp16": (torch.float16, "F16", "float16"),
          "fp32": (torch.float32, "F32", "float32")}


def parameter_shapes(c):
    h, hd = c["hidden_size"], c["head_dim"]
    q, kv, inter = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd, c["intermediate_size"]
    shapes = [("model.embed_tokens.weight", [c["vocab_size"], h])]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", [h]),
                   (p + "self_attn.q_proj.weight", [q, h]), (p + "self_attn.k_proj.weight", [kv, h]),
                   (p + "self_attn.v_proj.weight", [kv, h]), (p + "self_attn.o_proj.weight", [h, q]),
                   (p + "post_attention_layernorm.weight", [h]),
                   (p + "mlp.gate_proj.weight", [inter, h]), (p + "mlp.up_proj.weight", [inter, h]),
                   (p + "mlp.down_proj.weight", [h, inter])]
    shapes.append(("model.norm.weight", [h]))
    if not c["tie_word_embeddings"]:
        shapes.append(("lm_head.weight", [c["vocab_size"], h]))
    return shapes


def tensor_bytes(t):
    # numpy has no bfloat16: reinterpret the 2-byte values as int16 first.
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.contiguous().numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, dtype_name):
    header, offset, blobs = {}, 0, []
    for name, t in tensors:
        data = tensor_bytes(t)
        header[name] = {"dtype": dtype_name, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # as the reference writer pads the header
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    return offset


def inverse_frequencies(c):
    hd = c["head_dim"]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    s = c.get("rope_scaling")
    if not s:
        return inv
    old = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / s["low_freq_factor"], old / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / s["factor"], inv)
    smooth = (old / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def forward(c, w, ids):
    """Logits [B, S, V] in fp32 from the weights `w` (name -> fp32 tensor)."""
    B, S = ids.shape
    hd, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    eps = c["rms_norm_eps"]

    def rms(x, name):
        return w[name] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        return torch.cat((-x[..., hd // 2:], x[..., : hd // 2]), dim=-1)

    freqs = torch.arange(S).float()[:, None] * inverse_frequencies(c)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = w["model.embed_tokens.weight"][ids]
    mask = torch.full((S, S), float("-inf")).triu(1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, p + "input_layernorm.weight")
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, S, nh, hd).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, S, nkv, hd).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, S, nkv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(hd) + mask, dim=-1)
        x = x + (att @ v).transpose(1, 2).reshape(B, S, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, p + "post_attention_layernorm.weight")
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, "model.norm.weight")
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the folder to write (created if absent)")
    ap.add_argument("--shards", type=int, default=1, help="weights files (default 1)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference", action="store_true", help="also write reference.json")
    shape = {"hidden": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads",
             "kv_heads": "num_key_value_heads", "intermediate": "intermediate_size",
             "vocab": "vocab_size"}
    for flag in shape:
        ap.add_argument("--" + flag.replace("_", "-"), type=int, help="overrides " + shape[flag])
    ap.add_argument("--max-positions", type=int, help="overrides max_position_embeddings")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    c = dict(CONFIG)
    for flag, key in shape.items():
        if getattr(args, flag) is not None:
            c[key] = getattr(args, flag)
    if args.max_positions is not None:
        c["max_position_embeddings"] = args.max_positions
    c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    dtype, st_name, torch_name = DTYPES[args.dtype]
    c["torch_dtype"] = torch_name

    weights = {}
    for name, shape in parameter_shapes(c):
        if name.endswith("norm.weight"):  # near 1, not exactly, so that the weights matter
            t = 1 + 0.1 * torch.randn(shape)
        else:
            t = c["initializer_range"] * torch.randn(shape)
        weights[name] = t.to(dtype)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    names = list(weights)
    if args.shards <= 1:
        write_safetensors(os.path.join(args.out, "model.safetensors"), [(n, weights[n]) for n in names], st_name)
    else:
        per = math.ceil(len(names) / args.shards)
        weight_map, total = {}, 0
        for s in range(args.shards):
            file = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
            part = names[s * per:(s + 1) * per]
            total += write_safetensors(os.path.join(args.out, file), [(n, weights[n]) for n in part], st_name)
            weight_map.update({n: file for n in part})
        with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

    if args.reference:
        ids = torch.randint(c["vocab_size"], (2, 17), generator=torch.Generator().manual_seed(args.seed + 1))
        logits = forward(c, {n: t.float() for n, t in weights.items()}, ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, c["vocab_size"]), ids[:, 1:].reshape(-1))
        with open(os.path.join(args.out, "reference.json"), "w") as f:
            json.dump({"ids": ids.tolist(), "loss": loss.item()}, f)
    print(f"wrote {args.out} ({len(names)} tensors, {args.dtype}, {max(args.shards, 1)} file(s))")


if __name__ == "__main__":
    main()
