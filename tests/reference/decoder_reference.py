#!/usr/bin/env python3
"""Tiny random Hugging Face folders of each decoder family pstar trains, and their losses in float64.

    /usr/bin/python3 tests/reference/decoder_reference.py --family qwen3 --out DIR
        [--variant NAME] [--dtype fp32|bf16] [--seed 0] [--batch 4] [--seq 16] [--steps 2]
        [--lr 0.01] [--weight-decay 0.01] [--vocab V] [--max-positions P] [--weights-only]
        [--generate LENGTHS --new-tokens N]
    /usr/bin/python3 tests/reference/decoder_reference.py --count CONFIG_JSON

DIR receives config.json and model.safetensors spelled as the family's own Hugging Face classes
save them (Phi-3's fused qkv_proj and gate_up_proj; Gemma 3's 4B-27B layout, variant "wrapped",
with its language model under language_model.model.* beside a small stand-in vision tower),
tokens.bin (uint16 token ids) and reference.json: the mean cross-entropy of each of --steps
optimizer steps, where step s reads the --batch windows of --seq + 1 tokens that pstar's
"sequential" sampling gives it (window k starts at token k * seq), and one AdamW step of torch's
(one parameter group: every parameter decays; no warm-up, no clipping) follows each step but the
last. Everything is computed in float64 from the stored weights. With --generate (prompt lengths,
e.g. 9,4,13), DIR also receives generate.json: prompts of those lengths (random ids), and for each
its greedy continuation of --new-tokens tokens and one of random tokens, with the logits of every
step (the last position's), each prompt computed alone and without a cache: the whole sequence so
far at positions 0, 1, ..., as Hugging Face's model computes it (tests/engine/generate/).

The maths is written from Hugging Face's modeling files (transformers 4.5x and 5: LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM) and
reads config.json's keys as their config classes do, with their defaults, independently of pstar:
RMSNorm (Gemma's 1 + w), q/k norms over head_dim before RoPE, Gemma's scaled embedding and four
norms, sliding windows (key j visible to query i when i - window < j <= i), per-layer-type RoPE
(default, linear, llama3; Gemma 3's local base), query_pre_attn_scalar, nn.Embedding's
padding_idx (the pad row's lookups give no gradient), tied heads.

Needs only torch (Debian's python3-torch). pstar's tests (tests/engine/model/family_test.cpp)
load the folder, train on tokens.bin and compare.
"""

import argparse
import importlib.util
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The hand-written safetensors writer of the Llama example (no safetensors package needed).
TINY_LLAMA = _load("make_tiny_llama", os.path.join(ROOT, "examples", "llama", "make_tiny_llama.py"))
# Mixtral's and Qwen3-MoE's blocks and load-balancing loss.
MOE = _load("moe_reference", os.path.join(HERE, "moe_reference.py"))

# ---------------------------------------------------------------------------------------------
# Tiny configs, as each family's config.json spells them. Small enough to run in a second, with
# every feature of the family turned on in a way that changes the loss.

BASE = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 96,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "initializer_range": 0.02,
        "tie_word_embeddings": False}


def family_config(family, variant):
    c = dict(BASE)
    if family == "llama":
        c.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                  "rope_theta": 500000.0, "attention_bias": False, "mlp_bias": False,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16}})
    elif family == "mistral":
        c.update({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                  "hidden_act": "silu", "rope_theta": 10000.0, "sliding_window": 6})
    elif family == "qwen2":
        c.update({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
                  "rope_theta": 1000000.0, "use_sliding_window": False, "sliding_window": 32,
                  "max_window_layers": 3, "tie_word_embeddings": True})
    elif family == "qwen3":
        # head_dim 16: the query width (64) is not hidden_size, as in Qwen3-0.6B.
        c.update({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
                  "head_dim": 16, "rope_theta": 1000000.0, "attention_bias": False,
                  "use_sliding_window": False, "sliding_window": None, "max_window_layers": 3,
                  "tie_word_embeddings": True})
    elif family == "gemma3_text":
        # Layers 0 and 2 slide (window 5 of 16 positions), layer 1 is global; the global layers'
        # rope is linearly scaled, the local ones rotate by their own base.
        c.update({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                  "hidden_activation": "gelu_pytorch_tanh", "head_dim": 8,
                  "query_pre_attn_scalar": 12, "sliding_window": 5, "sliding_window_pattern": 2,
                  "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                  "rope_scaling": {"rope_type": "linear", "factor": 4.0},
                  "attn_logit_softcapping": None, "final_logit_softcapping": None,
                  "pad_token_id": 0, "tie_word_embeddings": True})
    elif family == "phi3":
        c.update({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_act": "silu",
                  "rope_theta": 250000.0, "rope_scaling": None, "sliding_window": None,
                  "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0,
                  "pad_token_id": 7, "rms_norm_eps": 1e-5})
    elif family in MOE.FAMILIES:
        c.update(MOE.family_config(family))
    else:
        raise SystemExit(f"unknown family {family}")
    if variant == "rope_parameters":
        # transformers 5: no top-level rope_theta/rope_scaling, one rope_parameters object (keyed
        # by layer type where the family has two).
        theta, scaling = c.pop("rope_theta"), c.pop("rope_scaling", None) or {}
        if family == "gemma3_text":
            local = c.pop("rope_local_base_freq")
            c["rope_parameters"] = {
                "full_attention": dict({"rope_type": "default", "rope_theta": theta}, **scaling),
                "sliding_attention": {"rope_type": "default", "rope_theta": local}}
        else:
            c["rope_parameters"] = dict({"rope_type": "default", "rope_theta": theta}, **scaling)
    elif family in MOE.FAMILIES and MOE.variant_config(c, variant):
        pass
    elif variant in LAYOUTS:
        # Gemma3ForConditionalGeneration: the shape under text_config, relying on
        # Gemma3TextConfig's defaults for keys it leaves out (as the published files do).
        assert family == "gemma3_text"
        # Heads (8 and 4 key/value) and RoPE bases (1e6, 1e4) from those defaults.
        text = {k: v for k, v in c.items() if k not in (
            "architectures", "num_attention_heads", "num_key_value_heads", "rope_theta",
            "rope_local_base_freq")}
        text["head_dim"] = 4
        c = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
             "text_config": text, "vision_config": {"model_type": "siglip_vision_model",
                                                    "hidden_size": 8},
             "mm_tokens_per_image": 4, "image_token_index": 95, "_layout": variant}
    elif variant:
        raise SystemExit(f"unknown variant {variant}")
    return c


# Where Gemma3ForConditionalGeneration keeps its language model: the published 4B-27B files
# (transformers 4 layout) and transformers 5's.
LAYOUTS = {
    "wrapped": ("language_model.model.", "language_model.lm_head.weight",
                ["vision_tower.vision_model.embeddings.patch_embedding.weight",
                 "multi_modal_projector.mm_input_projection_weight"]),
    "wrapped_v5": ("model.language_model.", "lm_head.weight",
                   ["model.vision_tower.vision_model.embeddings.patch_embedding.weight",
                    "model.multi_modal_projector.mm_input_projection_weight"]),
}


def layout(config):
    """(text prefix, head name, vision tensor names) of a config's checkpoint."""
    return LAYOUTS[config["_layout"]] if "_layout" in config else ("model.", "lm_head.weight", [])


# ---------------------------------------------------------------------------------------------
# config.json read as the families' config classes read it.

DEFAULTS = {
    "gemma3_text": {"hidden_activation": "gelu_pytorch_tanh", "num_attention_heads": 8,
                    "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
                    "query_pre_attn_scalar": 256, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
                    "tie_word_embeddings": True, "pad_token_id": 0, "rms_norm_eps": 1e-6},
}


def text_config(config):
    family = config["model_type"]
    c = dict(config["text_config"]) if family == "gemma3" else dict(config)
    family = "gemma3_text" if family == "gemma3" else family
    merged = dict(DEFAULTS.get(family, MOE.DEFAULTS.get(family, {})))
    merged.update(c)  # a key the file gives wins, null included, as in the config classes
    merged["model_type"] = family
    merged.setdefault("head_dim", merged["hidden_size"] // merged["num_attention_heads"])
    merged.setdefault("num_key_value_heads", merged["num_attention_heads"])
    merged.setdefault("tie_word_embeddings", False)
    return merged


def layer_types(c):
    n, family = c["num_hidden_layers"], c["model_type"]
    if family == "gemma3_text":
        p = c.get("sliding_window_pattern", 6)
        return ["sliding" if (i + 1) % p else "full" for i in range(n)]
    if family in ("qwen2", "qwen3", "qwen3_moe"):
        window = c.get("sliding_window") if c.get("use_sliding_window") else None
        return ["sliding" if window is not None and i >= c.get("max_window_layers", 28) else "full"
                for i in range(n)]
    if family in ("mistral", "phi3", "mixtral") and c.get("sliding_window") is not None:
        return ["sliding"] * n
    return ["full"] * n


def rope_of(c, kind):
    """(theta, rope_type, scaling dict) of a layer kind, from either spelling."""
    if "rope_parameters" in c:
        p = c["rope_parameters"]
        if "full_attention" in p:
            p = p["full_attention" if kind == "full" else "sliding_attention"]
        return p["rope_theta"], p.get("rope_type", "default"), p
    if kind == "sliding" and c["model_type"] == "gemma3_text":
        return c["rope_local_base_freq"], "default", {}
    s = c.get("rope_scaling") or {}
    return c["rope_theta"], s.get("rope_type", s.get("type", "default")), s


def inverse_frequencies(c, kind):
    theta, rope_type, s = rope_of(c, kind)
    hd = c["head_dim"]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    if rope_type == "default":
        return inv
    if rope_type == "linear":
        return inv / s["factor"]
    assert rope_type == "llama3", rope_type
    old, factor = s["original_max_position_embeddings"], s["factor"]
    low_wavelen, high_wavelen = old / s["low_freq_factor"], old / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


# ---------------------------------------------------------------------------------------------
# Parameter names and shapes as each family's checkpoint holds them.

def checkpoint_shapes(config):
    c = text_config(config)
    family = c["model_type"]
    prefix, head_name, vision = layout(config)
    h, hd, inter = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    qkv_bias = family == "qwen2" or c.get("attention_bias", False)
    o_bias = family != "qwen2" and c.get("attention_bias", False)
    mlp_bias = family == "llama" and c.get("mlp_bias", False)
    shapes = [(prefix + "embed_tokens.weight", [c["vocab_size"], h])]
    for i in range(c["num_hidden_layers"]):
        p = f"{prefix}layers.{i}."
        shapes.append((p + "input_layernorm.weight", [h]))
        if family == "phi3":
            shapes.append((p + "self_attn.qkv_proj.weight", [q + 2 * kv, h]))
        else:
            for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                shapes.append((p + f"self_attn.{name}.weight", [rows, h]))
                if qkv_bias:
                    shapes.append((p + f"self_attn.{name}.bias", [rows]))
        if family in ("qwen3", "qwen3_moe", "gemma3_text"):
            shapes += [(p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd])]
        shapes.append((p + "self_attn.o_proj.weight", [h, q]))
        if o_bias:
            shapes.append((p + "self_attn.o_proj.bias", [h]))
        shapes.append((p + "post_attention_layernorm.weight", [h]))
        if family == "gemma3_text":
            shapes.append((p + "pre_feedforward_layernorm.weight", [h]))
        if family in MOE.FAMILIES and MOE.sparse(c, i):
            shapes += MOE.block_shapes(c, p)
        elif family == "phi3":
            shapes.append((p + "mlp.gate_up_proj.weight", [2 * inter, h]))
        else:
            shapes += [(p + "mlp.gate_proj.weight", [inter, h]), (p + "mlp.up_proj.weight", [inter, h])]
        if not (family in MOE.FAMILIES and MOE.sparse(c, i)):
            shapes.append((p + "mlp.down_proj.weight", [h, inter]))
        if mlp_bias:
            shapes += [(p + "mlp.gate_proj.bias", [inter]), (p + "mlp.up_proj.bias", [inter]),
                       (p + "mlp.down_proj.bias", [h])]
        if family == "gemma3_text":
            shapes.append((p + "post_feedforward_layernorm.weight", [h]))
    shapes.append((prefix + "norm.weight", [h]))
    if not c["tie_word_embeddings"]:
        shapes.append((head_name, [c["vocab_size"], h]))
    if vision:  # a stand-in for the vision tower and projector pstar carries but does not train
        shapes += [(vision[0], [8, 3, 2, 2]), (vision[1], [8, h])]
    return shapes


def random_weights(config, generator):
    """Values large enough that every feature moves the loss: norms away from their identity."""
    c = text_config(config)
    one_plus = c["model_type"] == "gemma3_text"
    weights = {}
    for name, shape in checkpoint_shapes(config):
        if name.endswith("norm.weight"):
            t = 0.2 * torch.randn(shape, generator=generator, dtype=torch.float64)
            t = t if one_plus else 1 + t
        elif name.endswith(".bias"):
            t = 0.5 * torch.randn(shape, generator=generator, dtype=torch.float64)
        elif "embed_tokens" in name:
            # A tied head reads the table too: smaller, so that the logits stay moderate.
            std = 0.3 if c["tie_word_embeddings"] else 1.0
            t = std * torch.randn(shape, generator=generator, dtype=torch.float64)
        else:
            t = torch.randn(shape, generator=generator, dtype=torch.float64) / math.sqrt(shape[-1])
        weights[name] = t
    return weights


# ---------------------------------------------------------------------------------------------
# The forward pass, in float64, from the checkpoint's tensors.

def forward(config, w, ids, router_logits=None):
    """The logits of ids [B, S]; a mixture of experts' router logits go to `router_logits`."""
    c = text_config(config)
    router_logits = [] if router_logits is None else router_logits
    family = c["model_type"]
    prefix, head_name, _ = layout(config)
    B, S = ids.shape
    h, hd = c["hidden_size"], c["head_dim"]
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    eps = c["rms_norm_eps"]
    one_plus = family == "gemma3_text"
    act = F.silu if c.get("hidden_activation", c.get("hidden_act")) in ("silu", "swish") else \
        (lambda x: F.gelu(x, approximate="tanh"))
    scale = (c["query_pre_attn_scalar"] ** -0.5) if family == "gemma3_text" else hd ** -0.5
    qkv_bias = family == "qwen2" or c.get("attention_bias", False)

    def rms(x, name):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return n * (1.0 + w[name]) if one_plus else w[name] * n

    def linear(x, name, bias=False):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    def rotate_half(x):
        return torch.cat((-x[..., hd // 2:], x[..., : hd // 2]), dim=-1)

    tables = {}
    for kind in ("full", "sliding"):
        freqs = torch.arange(S, dtype=torch.float64)[:, None] * inverse_frequencies(c, kind)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        tables[kind] = (emb.cos(), emb.sin())
    pad = c.get("pad_token_id")
    x = F.embedding(ids, w[prefix + "embed_tokens.weight"], padding_idx=pad)
    if family == "gemma3_text":
        x = x * torch.tensor(h ** 0.5, dtype=torch.float32).to(x.dtype)
    i_idx = torch.arange(S)[:, None]
    j_idx = torch.arange(S)[None, :]
    for layer, kind in enumerate(layer_types(c)):
        p = f"{prefix}layers.{layer}."
        y = rms(x, p + "input_layernorm.weight")
        if family == "phi3":
            qkv = linear(y, p + "self_attn.qkv_proj")
            q, k, v = qkv[..., :nh * hd], qkv[..., nh * hd:(nh + nkv) * hd], qkv[..., (nh + nkv) * hd:]
        else:
            q = linear(y, p + "self_attn.q_proj", qkv_bias)
            k = linear(y, p + "self_attn.k_proj", qkv_bias)
            v = linear(y, p + "self_attn.v_proj", qkv_bias)
        q = q.view(B, S, nh, hd)
        k = k.view(B, S, nkv, hd)
        if family in ("qwen3", "qwen3_moe", "gemma3_text"):
            q, k = rms(q, p + "self_attn.q_norm.weight"), rms(k, p + "self_attn.k_norm.weight")
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.view(B, S, nkv, hd).transpose(1, 2)
        cos, sin = tables[kind]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        visible = j_idx <= i_idx
        if kind == "sliding":
            visible = visible & (j_idx > i_idx - c["sliding_window"])
        scores = (q @ k.transpose(2, 3)) * scale
        scores = scores.masked_fill(~visible, float("-inf"))
        att = torch.softmax(scores, dim=-1) @ v
        o = linear(att.transpose(1, 2).reshape(B, S, nh * hd), p + "self_attn.o_proj",
                   family != "qwen2" and c.get("attention_bias", False))
        if family == "gemma3_text":
            x = x + rms(o, p + "post_attention_layernorm.weight")
            y = rms(x, p + "pre_feedforward_layernorm.weight")
        else:
            x = x + o
            y = rms(x, p + "post_attention_layernorm.weight")
        mlp_bias = family == "llama" and c.get("mlp_bias", False)
        if family in MOE.FAMILIES and MOE.sparse(c, layer):
            x = x + MOE.block_forward(c, w, p, y, act, router_logits)
            continue
        if family == "phi3":
            gate, up = linear(y, p + "mlp.gate_up_proj").chunk(2, dim=-1)
        else:
            gate, up = linear(y, p + "mlp.gate_proj", mlp_bias), linear(y, p + "mlp.up_proj", mlp_bias)
        m = linear(act(gate) * up, p + "mlp.down_proj", mlp_bias)
        x = x + (rms(m, p + "post_feedforward_layernorm.weight") if family == "gemma3_text" else m)
    x = rms(x, prefix + "norm.weight")
    head = w[prefix + "embed_tokens.weight"] if c["tie_word_embeddings"] else w[head_name]
    return x @ head.T


def train_losses(logits_of, params, tokens, batch, seq, steps, lr, weight_decay, aux_of=None):
    """Each step's mean cross-entropy over its windows (step s reads windows s*batch ..), torch's
    AdamW over `params` between steps (one group, every parameter decays). `logits_of(ids)` gives
    the logits of ids [batch, seq]; `aux_of()`, where given, the term the last forward adds to the
    loss that trains (or None)."""
    opt = torch.optim.AdamW(list(params), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=weight_decay)
    out = []
    for s in range(steps):
        windows = [tokens[(s * batch + j) * seq:(s * batch + j) * seq + seq + 1] for j in range(batch)]
        ids = torch.stack(windows)
        logits = logits_of(ids[:, :-1]).double()
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
        out.append(loss.item())
        aux = aux_of() if aux_of is not None else None
        if s + 1 < steps:
            # None, not zero: torch's AdamW skips a parameter the step's loss does not reach (a
            # mixture of experts' expert no token chose), as pstar does (Note [held parameters]).
            opt.zero_grad(set_to_none=True)
            (loss if aux is None else loss + aux).backward()
            opt.step()
    return out


def losses(config, weights, tokens, batch, seq, steps, lr, weight_decay, aux_losses=None):
    """train_losses of this script's float64 forward from `weights`. A mixture of experts' each
    step's load-balancing loss goes to `aux_losses`; it trains where output_router_logits."""
    vision = layout(config)[2]
    params = {n: t.clone().requires_grad_(True) for n, t in weights.items() if n not in vision}
    c = text_config(config)
    router = []

    def logits_of(ids):
        router.clear()
        return forward(config, params, ids, router)

    def aux_of():
        if not router:
            return None
        value = MOE.aux_loss(c, router)
        if aux_losses is not None:
            aux_losses.append(value.item())
        return value * c["router_aux_loss_coef"] if c["output_router_logits"] else None

    return train_losses(logits_of, params.values(), tokens, batch, seq, steps, lr, weight_decay,
                        aux_of)


def make_case(family, variant, seed, count, vocab=None, max_positions=None, bf16=False):
    """A family's tiny config, its weights as stored (fp32 or bf16) and as read back (float64), and
    `count` token ids with the pad id, where there is one, every fifth (so that padding_idx
    matters)."""
    config = family_config(family, variant)
    text = config["text_config"] if "text_config" in config else config
    if vocab is not None:
        text["vocab_size"] = vocab
    if max_positions is not None:
        text["max_position_embeddings"] = max_positions
    c = text_config(config)
    generator = torch.Generator().manual_seed(seed)
    if c.get("_fused_experts"):
        # The values of the per-expert layout, stored fused: both layouts give the same losses.
        per_expert = {k: v for k, v in config.items() if k != "_fused_experts"}
        drawn = MOE.fuse(c, random_weights(per_expert, generator))
    else:
        drawn = random_weights(config, generator)
    if c.get("_routed"):
        MOE.route_by_halves(c, drawn)
    stored = {n: t.to(torch.bfloat16 if bf16 else torch.float32) for n, t in drawn.items()}
    weights = {n: t.to(torch.float64) for n, t in stored.items()}  # what a reader of the file sees
    if c.get("_routed"):
        tokens = MOE.routed_tokens(c["_routed"], c["vocab_size"], 16, count, generator)
    else:
        tokens = torch.randint(c["vocab_size"], (count,), generator=generator)
    if c.get("pad_token_id") is not None:
        tokens[::5] = c["pad_token_id"]
    return config, stored, weights, tokens


def continuation(config, weights, prompt, choose, new_tokens):
    """The tokens `choose` picks after `prompt` (from each step's logits) and those logits, of the
    last position of the prompt and the tokens so far: a full forward a step, no cache, no padding."""
    seq, tokens, logits = list(prompt), [], []
    for _ in range(new_tokens):
        with torch.no_grad():
            last = forward(config, weights, torch.tensor([seq]))[0, -1]
        logits.append(last.tolist())
        tokens.append(choose(last))
        seq.append(tokens[-1])
    return tokens, logits


def generation(config, weights, prompts, new_tokens, generator):
    """Each prompt alone: its greedy continuation, and one of random tokens (every step's input
    then differs, where greedy continuations of random tiny models tend to repeat one token)."""
    vocab = text_config(config)["vocab_size"]
    out = {"prompts": prompts}
    for name, choose in (("greedy", lambda logits: int(logits.argmax())),
                         ("forced", lambda logits: int(torch.randint(vocab, (1,),
                                                                     generator=generator)))):
        runs = [continuation(config, weights, p, choose, new_tokens) for p in prompts]
        out[name] = {"tokens": [r[0] for r in runs], "logits": [r[1] for r in runs]}
    return out


def count_parameters(path):
    """The parameters a config.json's checkpoint holds (a tied head once)."""
    with open(path) as f:
        config = json.load(f)
    total = 0
    for _, shape in checkpoint_shapes(config):
        total += math.prod(shape)
    return total


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--count":
        print(count_parameters(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", required=True,
                    choices=["llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3",
                             "mixtral", "qwen3_moe"])
    ap.add_argument("--variant", default="",
                    help="rope_parameters | wrapped | wrapped_v5 (the two: gemma3_text) | aux | "
                         "fused_experts | routed | routed_reverse | routed_gap (the five: "
                         "mixtral, qwen3_moe)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--steps", type=int, help="optimizer steps (default 2; routed_gap: 5)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--vocab", type=int, help="overrides vocab_size (e.g. a real tokenizer's)")
    ap.add_argument("--max-positions", type=int, help="overrides max_position_embeddings")
    ap.add_argument("--weights-only", action="store_true",
                    help="write config.json and the weights only (no tokens, no reference)")
    ap.add_argument("--generate", help="prompt lengths, e.g. 9,4,13: also write generate.json")
    ap.add_argument("--new-tokens", type=int, default=8, help="with --generate: tokens a prompt")
    args = ap.parse_args()

    if args.steps is None:
        args.steps = MOE.ROUTED_STEPS.get(args.variant, 2)
    if args.variant in MOE.ROUTED:
        assert args.seq == 16, "the routed variants lay out windows of 16 tokens"
    count = args.steps * args.batch * args.seq + 1
    config, stored, weights, tokens = make_case(args.family, args.variant, args.seed, count,
                                                args.vocab, args.max_positions,
                                                args.dtype == "bf16")

    os.makedirs(args.out, exist_ok=True)
    config = dict(config, torch_dtype="bfloat16" if args.dtype == "bf16" else "float32")
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump({k: v for k, v in config.items() if not k.startswith("_")}, f, indent=2)
    TINY_LLAMA.write_safetensors(os.path.join(args.out, "model.safetensors"), list(stored.items()),
                                 "BF16" if args.dtype == "bf16" else "F32")
    if args.generate:
        prompt_generator = torch.Generator().manual_seed(args.seed + 1)
        vocab = text_config(config)["vocab_size"]
        prompts = [torch.randint(vocab, (int(n),), generator=prompt_generator).tolist()
                   for n in args.generate.split(",")]
        with open(os.path.join(args.out, "generate.json"), "w") as f:
            json.dump(generation(config, weights, prompts, args.new_tokens, prompt_generator), f)
    if args.weights_only:
        print(f"wrote {args.out} ({args.family}{' ' + args.variant if args.variant else ''})")
        return
    with open(os.path.join(args.out, "tokens.bin"), "wb") as f:
        f.write(tokens.numpy().astype("<u2").tobytes())
    aux = []
    result = {"family": args.family, "variant": args.variant, "losses":
              losses(config, weights, tokens, args.batch, args.seq, args.steps, args.lr,
                     args.weight_decay, aux),
              "batch": args.batch, "seq": args.seq, "lr": args.lr,
              "weight_decay": args.weight_decay}
    if aux:
        result["aux_losses"] = aux
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
