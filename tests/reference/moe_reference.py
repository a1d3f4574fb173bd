"""The mixture-of-experts parts of decoder_reference.py: Mixtral's and Qwen3-MoE's config keys,
checkpoint names and block, in float64, written from Hugging Face's modeling files
(MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock, load_balancing_loss_func; transformers 4.5x and
5) independently of pstar.

The block: router logits, their softmax, each token's top_k experts and probabilities,
renormalised to sum to 1 (Mixtral always, Qwen3-MoE with norm_topk_prob), each expert's gated MLP
on the tokens that chose it times their weight, summed. The load-balancing loss over the sparse
layers' router logits: num_experts * sum_e (share of (token, slot) choices of e) * (mean
probability of e), added times router_aux_loss_coef when output_router_logits is set.

Two checkpoint layouts: the Hub's per-expert tensors (transformers 4) and transformers 5's fused
ones (variant "fused_experts": the block under mlp, router mlp.gate.weight, experts.gate_up_proj
[E, 2I, H] with each expert's gate rows before its up rows, experts.down_proj [E, H, I]).
"""

import torch
import torch.nn.functional as F

FAMILIES = ("mixtral", "qwen3_moe")

# How each family's config.json and checkpoint spell the block: (block, experts key, width key,
# gate, up, down).
SPELLING = {
    "mixtral": ("block_sparse_moe", "num_local_experts", "intermediate_size", "w1", "w3", "w2"),
    "qwen3_moe": ("mlp", "num_experts", "moe_intermediate_size", "gate_proj", "up_proj",
                  "down_proj"),
}

# The config classes' defaults for the keys a file may leave out.
DEFAULTS = {
    "mixtral": {"num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.001,
                "output_router_logits": False, "hidden_act": "silu", "rms_norm_eps": 1e-6,
                "rope_theta": 1e6},
    "qwen3_moe": {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "router_aux_loss_coef": 0.001, "output_router_logits": False,
                  "hidden_act": "silu", "rms_norm_eps": 1e-6, "use_sliding_window": False},
}


def family_config(family):
    """The tiny config's family keys: 4 experts of width 24, top 2; Qwen3-MoE's layer 1 dense
    (mlp_only_layers, intermediate_size 48) and its top-k weights not renormalised."""
    if family == "mixtral":
        return {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "hidden_act": "silu", "rope_theta": 1000000.0, "sliding_window": None,
                "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2,
                "router_aux_loss_coef": 0.02, "output_router_logits": False,
                "router_jitter_noise": 0.0}
    return {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "hidden_act": "silu", "head_dim": 16, "rope_theta": 1000000.0,
            "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": 3, "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 24, "norm_topk_prob": False, "decoder_sparse_step": 1,
            "mlp_only_layers": [1], "router_aux_loss_coef": 0.02, "output_router_logits": False}


def variant_config(c, variant):
    """The variants: "aux" trains the load-balancing loss (output_router_logits, a coefficient
    large enough to move the second step); "fused_experts" stores transformers 5's layout."""
    if variant in ROUTED:
        c["_routed"] = variant
    elif variant == "aux":
        c.update({"output_router_logits": True, "router_aux_loss_coef": 0.5})
    elif variant == "fused_experts":
        c["_fused_experts"] = True
    else:
        return False
    return True


def sparse(c, layer):
    if c["model_type"] == "mixtral":
        return True
    step = c.get("decoder_sparse_step", 1)
    return (layer not in c.get("mlp_only_layers", []) and c["num_experts"] > 0
            and (layer + 1) % step == 0)


def _sizes(c):
    block, experts, width, gate, up, down = SPELLING[c["model_type"]]
    return block, c[experts], c[width], (gate, up, down)


def block_shapes(c, p):
    """The checkpoint tensors of layer prefix p's block."""
    block, e, inter, (gate, up, down) = _sizes(c)
    h = c["hidden_size"]
    if c.get("_fused_experts"):
        return [(p + "mlp.gate.weight", [e, h]), (p + "mlp.experts.gate_up_proj", [e, 2 * inter, h]),
                (p + "mlp.experts.down_proj", [e, h, inter])]
    shapes = [(p + f"{block}.gate.weight", [e, h])]
    for j in range(e):
        q = f"{p}{block}.experts.{j}."
        shapes += [(q + f"{gate}.weight", [inter, h]), (q + f"{up}.weight", [inter, h]),
                   (q + f"{down}.weight", [h, inter])]
    return shapes


def _expert(c, w, p, j, x, act):
    block, _, inter, (gate, up, down) = _sizes(c)
    if c.get("_fused_experts"):
        g, u = (x @ w[p + "mlp.experts.gate_up_proj"][j].T).chunk(2, dim=-1)
        return (act(g) * u) @ w[p + "mlp.experts.down_proj"][j].T
    q = f"{p}{block}.experts.{j}."
    return (act(x @ w[q + f"{gate}.weight"].T) * (x @ w[q + f"{up}.weight"].T)) @ \
        w[q + f"{down}.weight"].T


def block_forward(c, w, p, y, act, router_logits):
    """Layer prefix p's block on y [B, S, H]; appends its router logits [B*S, E]."""
    block, e, _, _ = _sizes(c)
    B, S, H = y.shape
    x = y.reshape(-1, H)
    router = w[p + ("mlp" if c.get("_fused_experts") else block) + ".gate.weight"]
    logits = x @ router.T
    router_logits.append(logits)
    probs = torch.softmax(logits, dim=-1)
    weights, chosen = probs.topk(c["num_experts_per_tok"], dim=-1)
    if c["model_type"] == "mixtral" or c.get("norm_topk_prob", False):
        weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for j in range(e):
        token, slot = torch.where(chosen == j)
        if token.numel() == 0:
            continue  # as Hugging Face: an expert without tokens is not called
        out = out.index_add(0, token, _expert(c, w, p, j, x[token], act) *
                            weights[token, slot, None])
    return out.view(B, S, H)


def aux_loss(c, router_logits):
    """load_balancing_loss_func over the sparse layers' logits (no attention mask)."""
    e, k = _sizes(c)[1], c["num_experts_per_tok"]
    logits = torch.cat(router_logits, dim=0)
    probs = torch.softmax(logits, dim=-1)
    _, chosen = probs.topk(k, dim=-1)
    mask = F.one_hot(chosen, e).double()         # [N, k, E]
    tokens_per_expert = mask.mean(0)             # [k, E]
    probability_per_expert = probs.mean(0)       # [E]
    return (tokens_per_expert * probability_per_expert[None, :]).sum() * e


def fuse(c, weights):
    """The per-expert tensors of `weights` in transformers 5's fused layout (the same values)."""
    block, e, _, (gate, up, down) = _sizes(c)
    out = {}
    for name, t in weights.items():
        at = name.find(f".{block}.")
        rest = name[at + len(block) + 2:]
        if at < 0 or not (rest == "gate.weight" or rest.startswith("experts.")):
            out[name] = t  # not a block's (Qwen3-MoE's dense layers are under mlp too)
            continue
        p = name[:at + 1]
        if rest == "gate.weight":
            out[p + "mlp.gate.weight"] = t
        elif p + "mlp.experts.down_proj" not in out:
            q = [f"{p}{block}.experts.{j}." for j in range(e)]
            out[p + "mlp.experts.gate_up_proj"] = torch.stack(
                [torch.cat((weights[x + f"{gate}.weight"], weights[x + f"{up}.weight"])) for x in q])
            out[p + "mlp.experts.down_proj"] = torch.stack([weights[x + f"{down}.weight"] for x in q])
    return out


# Variants whose routing the data decides: token ids below half the vocabulary choose experts
# 0 and 1 in every sparse layer, the others experts 2 and 3, and each window (16 tokens) is all
# low (L) or all high (H) ids. With 4 windows a step and two ranks of two windows each:
# "routed" (L L L L | L L H H): experts 2 and 3 idle for the whole first step (the warm-up), then
# used, on one rank only; "routed_reverse" (L L H H | H H H H): every expert used in the warm-up
# (on different ranks), experts 0 and 1 idle for the whole second step; "routed_gap" (L L H H |
# L L H H | L L L L | L L H H | L L H H, five steps): experts 2 and 3 idle for the whole third step
# on every rank, between steps that use them. torch's AdamW skips an expert no token chose (its
# gradient is None: the modules are never called), so in "routed_gap" the third update leaves
# experts 2 and 3 as they are (no weight decay, moments kept) and the fourth runs their bias
# corrections at their own step count, 3.
ROUTED = {"routed": "LLLLLLHH", "routed_reverse": "LLHHHHHH",
          "routed_gap": "LLHHLLHHLLLLLLHHLLHH"}
ROUTED_STEPS = {"routed_gap": 5}


def route_by_halves(c, weights):
    """Makes `weights` route as ROUTED says: coordinate 0 of each token's embedding +8 (low ids)
    or -8 (high), the routers' rows for experts 0, 1 +2 on it and for experts 2, 3 -2 (beside
    their random rows, which order the experts within a pair)."""
    assert _sizes(c)[1] == 4 and c["num_experts_per_tok"] == 2
    v = c["vocab_size"]
    for name, t in weights.items():
        if name.endswith("embed_tokens.weight"):
            t[: v // 2, 0] += 8.0
            t[v // 2:, 0] -= 8.0
        elif name.endswith(".gate.weight") and ".experts." not in name and t.shape[0] == 4:
            t[:2, 0] += 2.0
            t[2:, 0] -= 2.0


def routed_tokens(variant, vocab, seq, count, generator):
    pattern = ROUTED[variant]
    tokens = torch.empty(count, dtype=torch.long)
    for k in range((count + seq - 1) // seq):
        low = pattern[min(k, len(pattern) - 1)] == "L"
        n = min(seq, count - k * seq)
        tokens[k * seq:k * seq + n] = torch.randint(vocab // 2, (n,), generator=generator) + \
            (0 if low else vocab // 2)
    return tokens
