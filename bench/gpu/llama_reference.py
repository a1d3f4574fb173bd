"""A Llama-family decoder for fsdp2_reference.py (--model llama), written from Hugging Face's
LlamaForCausalLM: the same parameter names and shapes, RMSNorm computed in fp32, rotary embeddings
(with llama3 frequency scaling where the config asks for it), grouped-query attention, a SwiGLU
MLP, and an untied LM head unless tie_word_embeddings. pstar's Llama (libengine/src/model/llama.cpp)
implements the same model, so both sides of a benchmark do the same work per token.

tests/bench/llama_reference_test.py checks this module's logits against
examples/llama/make_tiny_llama.py's own forward pass on the same weights."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

# The shape's figures live in a module without torch, for gpt_bench_util.py; re-exported here.
from llama_shape import expected_params, flops_per_token, read_config, read_config_dict  # noqa: F401

def inverse_frequencies(c, device):
    hd = c["head_dim"]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64, device=device)
                                     .float() / hd))
    s = c.get("rope_scaling")
    if not s or s.get("rope_type", s.get("type")) in (None, "default"):
        return inv
    if s.get("rope_type", s.get("type")) != "llama3":
        raise ValueError(f"rope_scaling {s}: only llama3 scaling is modelled here")
    old = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / s["low_freq_factor"], old / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / s["factor"], inv)
    smooth = (old / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


class RmsNorm(nn.Module):
    def __init__(self, hidden, eps, device):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden, device=device))

    def forward(self, x):
        f = x.float()
        f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * f.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        h, hd = c["hidden_size"], c["head_dim"]
        self.heads, self.kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], hd
        self.q_proj = nn.Linear(h, self.heads * hd, bias=c["qkv_bias"], device=device)
        self.k_proj = nn.Linear(h, self.kv_heads * hd, bias=c["qkv_bias"], device=device)
        self.v_proj = nn.Linear(h, self.kv_heads * hd, bias=c["qkv_bias"], device=device)
        self.o_proj = nn.Linear(self.heads * hd, h, bias=c["o_bias"], device=device)

    def forward(self, x, cos, sin, attention):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        if attention == "sdpa" and group > 1 and _sdpa_has_gqa():
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            if group > 1:
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            if attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(self.head_dim)
                future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
                y = scores.masked_fill(future, float("-inf")).softmax(-1).to(v.dtype) @ v
        return self.o_proj(y.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


def _sdpa_has_gqa():
    # enable_gqa arrived in PyTorch 2.5.
    try:
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 5)


class Mlp(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        h, inter, bias = c["hidden_size"], c["intermediate_size"], c["mlp_bias"]
        self.gate_proj = nn.Linear(h, inter, bias=bias, device=device)
        self.up_proj = nn.Linear(h, inter, bias=bias, device=device)
        self.down_proj = nn.Linear(inter, h, bias=bias, device=device)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c, attention, checkpointing, device):
        super().__init__()
        self.attention, self.checkpointing = attention, checkpointing
        self.input_layernorm = RmsNorm(c["hidden_size"], c["rms_norm_eps"], device)
        self.self_attn = Attention(c, device)
        self.post_attention_layernorm = RmsNorm(c["hidden_size"], c["rms_norm_eps"], device)
        self.mlp = Mlp(c, device)

    def _forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, self.attention)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward(self, x, cos, sin):
        # As the GPT blocks: FSDP2's hooks stay outside the recomputed region.
        if self.checkpointing and torch.is_grad_enabled():
            return torch.utils.checkpoint.checkpoint(self._forward, x, cos, sin,
                                                     use_reentrant=False)
        return self._forward(x, cos, sin)


class Inner(nn.Module):
    """LlamaModel's part: model.embed_tokens, model.layers, model.norm."""

    def __init__(self, c, attention, checkpointing, device):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"], device=device)
        self.layers = nn.ModuleList(Block(c, attention, checkpointing, device)
                                    for _ in range(c["num_hidden_layers"]))
        self.norm = RmsNorm(c["hidden_size"], c["rms_norm_eps"], device)


class Llama(nn.Module):
    def __init__(self, c, attention="sdpa", checkpointing=True, device=None):
        super().__init__()
        self.c = c
        self.model = Inner(c, attention, checkpointing, device)
        self.lm_head = None
        if not c["tie_word_embeddings"]:
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False, device=device)
        self._inv_freq = {}

    # fsdp2_reference.py's interface: the repeated blocks, and the modules outside them.
    def blocks(self):
        return self.model.layers

    def root_modules(self):
        return [m for m in (self.model.embed_tokens, self.model.norm, self.lm_head) if m is not None]

    @torch.no_grad()
    def init_block(self, block):
        std = self.c["initializer_range"]
        for lin in (block.self_attn.q_proj, block.self_attn.k_proj, block.self_attn.v_proj,
                    block.self_attn.o_proj, block.mlp.gate_proj, block.mlp.up_proj,
                    block.mlp.down_proj):
            lin.weight.normal_(0.0, std)
            if lin.bias is not None:
                lin.bias.zero_()
        block.input_layernorm.weight.fill_(1.0)
        block.post_attention_layernorm.weight.fill_(1.0)

    @torch.no_grad()
    def init_root(self):
        std = self.c["initializer_range"]
        self.model.embed_tokens.weight.normal_(0.0, std)
        self.model.norm.weight.fill_(1.0)
        if self.lm_head is not None:
            self.lm_head.weight.normal_(0.0, std)

    def rotary(self, seq, device, dtype):
        # Not a buffer: models built on the meta device and materialised block by block (FSDP2)
        # would leave a buffer uninitialised; the table is tiny and made once per device.
        key = str(device)
        if key not in self._inv_freq:
            self._inv_freq[key] = inverse_frequencies(self.c, device)
        freqs = torch.arange(seq, device=device).float()[:, None] * self._inv_freq[key][None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        cos, sin = self.rotary(ids.size(1), ids.device, x.dtype)
        for block in self.model.layers:
            x = block(x, cos, sin)
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, head)
