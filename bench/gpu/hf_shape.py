"""The shape of a decoder from its Hugging Face config.json, for the benchmarks that train Hugging
Face's own classes (hf_reference.py, fsdp2_reference.py --model hf): the config as transformers
reads it (a multimodal wrapper's text part, fewer layers on request), its parameter counts (all,
and those active a token in a mixture of experts), and its model FLOPs per token counted as pstar
counts them (Note [flops per token] in libengine/src/plan/estimate.cpp), so that TFLOPS on both
sides of a benchmark are the same work over the time. Standard library only:
tests/bench/hf_shape_test.py checks every count against `pstar estimate` where torch and
transformers are absent.

    python3 bench/gpu/hf_shape.py CONFIG.json [--layers N] [--seq S] [--write OUT.json]
"""

import argparse
import json
import sys

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3", "mixtral", "qwen3_moe")
# Defaults of transformers' config classes that published files leave out (Gemma 3's text_config
# gives only some keys).
_DEFAULTS = {
    "gemma3_text": {"vocab_size": 262208, "head_dim": 256, "tie_word_embeddings": True,
                    "num_attention_heads": 8, "num_key_value_heads": 4},
}
# Families whose attention normalises q and k per head (a head_dim weight each), and whose layers
# have four norms (sandwich) instead of two.
_QK_NORM = ("qwen3", "qwen3_moe", "gemma3_text")
_SANDWICH = ("gemma3_text",)


def text_config(config, layers=None):
    """The config.json transformers' AutoModelForCausalLM builds from: a wrapper's text_config
    (Gemma 3's 4B-27B folders), with `layers` layers when given. Lists sized by the layers are cut
    to them; ValueError names a family this module does not count."""
    c = dict(config)
    if "text_config" in c:
        c = dict(c["text_config"])
    kind = c.get("model_type")
    if kind not in FAMILIES:
        raise ValueError(f"model_type {kind!r}: expected one of {', '.join(FAMILIES)}")
    for key, value in _DEFAULTS.get(kind, {}).items():
        c.setdefault(key, value)
    if layers is not None:
        if layers < 1:
            raise ValueError(f"layers {layers}: expected at least 1")
        c["num_hidden_layers"] = layers
        if isinstance(c.get("layer_types"), list):
            c["layer_types"] = c["layer_types"][:layers]
        if isinstance(c.get("mlp_only_layers"), list):
            c["mlp_only_layers"] = [i for i in c["mlp_only_layers"] if i < layers]
    return c


def load(path, layers=None):
    with open(path) as f:
        return text_config(json.load(f), layers)


def _widths(c):
    h, heads = c["hidden_size"], c["num_attention_heads"]
    head_dim = c.get("head_dim") or h // heads
    kv_heads = c.get("num_key_value_heads") or heads
    return h, heads * head_dim, kv_heads * head_dim, head_dim


def _experts(c):
    """(experts, top_k, expert width) of a mixture of experts; None for a dense model."""
    kind = c["model_type"]
    if kind == "mixtral":
        return c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"]
    if kind == "qwen3_moe" and c.get("num_experts", 0) > 0:
        return c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    return None


def sparse_layers(c):
    """Which layers hold the experts (Qwen3-MoE's decoder_sparse_step and mlp_only_layers)."""
    n = c["num_hidden_layers"]
    if _experts(c) is None:
        return [False] * n
    if c["model_type"] == "mixtral":
        return [True] * n
    step, dense = c.get("decoder_sparse_step", 1), set(c.get("mlp_only_layers") or [])
    return [i not in dense and (i + 1) % step == 0 for i in range(n)]


def params(c, active=False):
    """Every parameter; with `active`, those a token runs through (the router and top_k experts
    of a sparse layer, not all of them)."""
    kind = c["model_type"]
    h, q, kv, head_dim = _widths(c)
    inter, vocab = c["intermediate_size"], c["vocab_size"]
    bias = c.get("attention_bias", False)
    attention = 2 * h * q + 2 * h * kv
    attention += (q + 2 * kv) * (kind == "qwen2" or bias) + h * (kind != "qwen2" and bias)
    attention += 2 * head_dim * (kind in _QK_NORM)
    norms = (4 if kind in _SANDWICH else 2) * h
    dense_mlp = 3 * h * inter + (2 * inter + h) * c.get("mlp_bias", False)
    moe = _experts(c)
    total = 0
    for sparse in sparse_layers(c):
        total += attention + norms
        if not sparse:
            total += dense_mlp
            continue
        experts, top_k, width = moe
        total += h * experts + (top_k if active else experts) * 3 * h * width
    head = 0 if c.get("tie_word_embeddings", False) else vocab * h
    return total + vocab * h + h + head


def flops_per_token(c, seq):
    """pstar's model FLOPs a token trains (Note [flops per token]): forward and backward of every
    matrix a token runs through (q, k, v, o; the MLP or the router and top_k experts; the head)
    and attention's scores and values over the whole S x S matrix; recomputation not counted."""
    h, q, kv, _ = _widths(c)
    attention = 2 * (2 * h * q + 2 * h * kv) + 2 * 2 * seq * q
    layers = 0.0
    moe = _experts(c)
    for sparse in sparse_layers(c):
        if sparse:
            experts, top_k, width = moe
            layers += attention + 2 * h * experts + top_k * 2 * 3 * h * width
        else:
            layers += attention + 2 * 3 * h * c["intermediate_size"]
    return 3 * (layers + 2 * c["vocab_size"] * h)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("--layers", type=int)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--write", metavar="OUT.json", help="write the config transformers builds from")
    a = p.parse_args(argv)
    try:
        c = load(a.config, a.layers)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"hf_shape: {a.config}: {e}")
    if a.write:
        with open(a.write, "w") as f:
            json.dump(c, f, indent=2)
    print(json.dumps({"model_type": c["model_type"], "layers": c["num_hidden_layers"],
                      "params": params(c), "active_params": params(c, active=True),
                      "flops_per_token": flops_per_token(c, a.seq), "seq": a.seq}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
