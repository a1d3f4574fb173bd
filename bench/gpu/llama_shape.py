"""The shape of a Llama-family model from its Hugging Face config.json: the fields the benchmarks
need, its parameter count and its model FLOPs per token. Standard library only (gpt_bench_util.py
uses it where torch may be absent); llama_reference.py builds the model itself."""

import json

# Keys read from config.json, with Hugging Face's defaults where the file may leave one out.
_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size")


def read_config(path):
    """The fields of a Hugging Face config.json this model needs; ValueError names what is off."""
    with open(path) as f:
        return read_config_dict(json.load(f))


def read_config_dict(c):
    kind = c.get("model_type")
    if kind not in ("llama", "mistral", "qwen2"):
        raise ValueError(f"model_type {kind!r}: expected llama, mistral or qwen2")
    missing = [k for k in _REQUIRED if k not in c]
    if missing:
        raise ValueError("missing " + ", ".join(missing))
    if kind == "mistral" or c.get("use_sliding_window"):
        raise ValueError("sliding-window attention is not modelled here")
    out = {k: c[k] for k in _REQUIRED}
    out["model_type"] = kind
    out["num_key_value_heads"] = c.get("num_key_value_heads", c["num_attention_heads"])
    out["head_dim"] = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    out["rms_norm_eps"] = c.get("rms_norm_eps", 1e-6)
    out["rope_theta"] = c.get("rope_theta", 10000.0)
    out["rope_scaling"] = c.get("rope_scaling")
    out["tie_word_embeddings"] = c.get("tie_word_embeddings", False)
    out["initializer_range"] = c.get("initializer_range", 0.02)
    # Qwen2 always has q/k/v biases; Llama has them on q/k/v/o with attention_bias.
    out["qkv_bias"] = kind == "qwen2" or c.get("attention_bias", False)
    out["o_bias"] = kind != "qwen2" and c.get("attention_bias", False)
    out["mlp_bias"] = c.get("mlp_bias", False)
    if out["num_attention_heads"] % out["num_key_value_heads"]:
        raise ValueError("num_attention_heads is not a multiple of num_key_value_heads")
    return out


def expected_params(c):
    """The parameter count from the shape alone, counted independently of the modules below."""
    h, hd, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * inter + 2 * h
    per_layer += (q + 2 * kv) * c["qkv_bias"] + h * c["o_bias"] + (2 * inter + h) * c["mlp_bias"]
    head = 0 if c["tie_word_embeddings"] else c["vocab_size"] * h
    return c["num_hidden_layers"] * per_layer + c["vocab_size"] * h + h + head


def flops_per_token(c, params, seq):
    """6N for the matmuls forward and backward (N: every parameter, the embedding table too, as
    pstar's GPT figures count it) plus 12·L·(heads·head_dim)·s for attention scores and values.
    Recomputation is not counted."""
    q = c["num_attention_heads"] * c["head_dim"]
    return 6 * params + 12 * c["num_hidden_layers"] * q * seq
