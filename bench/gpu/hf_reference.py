"""Hugging Face's own decoder classes for fsdp2_reference.py (--model hf): the model that
transformers' AutoModelForCausalLM builds from a config.json (Qwen3, Gemma 3, Phi-4, Mixtral,
Qwen3-MoE, ... as transformers computes them, its own attention, experts and initialisation), with
the interface fsdp2_reference.py's builders use: the repeated layers, the modules outside them, and
the initialisation of each, so that FSDP2 materialises and shards one layer at a time from the
meta device.

Needs transformers (the GPU machine has it; tests/bench/hf_shape_test.py checks the shape figures
where it is absent). bench/gpu/hf_shape.py gives the parameter counts and FLOPs both sides share.
"""

import torch
import torch.nn as nn

# Keys of a config.json that are not the model's shape (transformers sets them itself, or they name
# the checkpoint's storage).
_NOT_SHAPE = ("architectures", "torch_dtype", "dtype", "model_type", "transformers_version",
              "auto_map")


def _rotary(module):
    return "RotaryEmbedding" in type(module).__name__


class HfDecoder(nn.Module):
    """AutoModelForCausalLM.from_config(config) on `device`, returning fp32 logits' inputs."""

    def __init__(self, config, attention, checkpointing, device, experts=None):
        super().__init__()
        import transformers  # here: the rest of fsdp2_reference.py runs without it

        kwargs = {k: v for k, v in config.items() if k not in _NOT_SHAPE and not k.startswith("_")}
        hf_config = transformers.AutoConfig.for_model(config["model_type"], **kwargs)
        hf_config.use_cache = False
        impl = "sdpa" if attention == "sdpa" else "eager"
        with torch.device(device):
            self.lm = transformers.AutoModelForCausalLM.from_config(hf_config,
                                                                    attn_implementation=impl)
        if experts:  # a mixture of experts' expert kernel (transformers 5: eager, grouped_mm, ...)
            if not hasattr(self.lm, "set_experts_implementation"):
                raise RuntimeError("hf_reference: this transformers has no experts implementations "
                                   f"to choose from (--experts-implementation {experts})")
            self.lm.set_experts_implementation(experts)
        # What the run used, for its record (None: a dense model, or a transformers without them).
        self.experts_implementation = getattr(self.lm.config, "_experts_implementation", None)
        self.lm.float()  # fp32 parameters (FSDP2 casts its gathered copies to bf16), as pstar's
        self.lm.train()  # gradient checkpointing and dropout follow the training flag
        if checkpointing:
            self.lm.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        self.tied = bool(getattr(hf_config, "tie_word_embeddings", False))

    def forward(self, ids):
        return self.lm(input_ids=ids, use_cache=False).logits

    def blocks(self):
        return self.lm.model.layers

    def root_modules(self):
        """Everything outside the layers: the embedding, the final norm, the rotary tables and the
        LM head."""
        inner = [m for name, m in self.lm.model.named_children() if name != "layers"]
        return inner + [m for name, m in self.lm.named_children() if name != "model"]

    @torch.no_grad()
    def _initialise(self, module):
        # transformers' own initialisation, module by module (its _init_weights also recomputes
        # the rotary tables, which to_empty left uninitialised: they are not parameters).
        for m in module.modules():
            self.lm._init_weights(m)
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise RuntimeError(f"hf_reference: {type(module).__name__}.{name} is not finite "
                                   "after transformers' _init_weights (this transformers does not "
                                   "initialise it after a meta-device build)")

    def init_block(self, block):
        self._initialise(block)

    @torch.no_grad()
    def init_root(self):
        if self.tied:  # to_empty gave the embedding and the head a parameter each: one again
            self.lm.tie_weights()
            head, table = self.lm.get_output_embeddings(), self.lm.get_input_embeddings()
            if head.weight is not table.weight:
                raise RuntimeError("hf_reference: tie_weights() left the LM head untied")
        for m in self.root_modules():
            self._initialise(m)
        if not any(_rotary(m) for m in self.lm.modules()):
            raise RuntimeError("hf_reference: the model has no rotary embedding module")
