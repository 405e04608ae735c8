"""A decoder-only transformer's dimensions, as far as step time and memory depend on them.

Counts follow the usual dense/MoE decoder: per layer a query, key, value and output
projection, an MLP (gated: gate, up and down matrices; plain: up and down), two RMS norms;
then a token embedding, an LM head (the embedding itself when tied) and a final norm.
Biases, rotary tables and per-head norms are left out: they are under 0.1% of any model
here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from vllm_sim.perf.kv_spec import mixer_params

# Architectures whose MLP is two matrices (up, down) rather than three (gate, up, down).
# Everything else in vLLM's Llama/Qwen/Mistral/Gemma lineage is gated, whatever its
# activation is called, so the activation name cannot decide this.
_PLAIN_MLP_TYPES: Final = frozenset(
    {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "gpt_bigcode", "starcoder2", "phi"}
)
# MoE architectures with one always-on shared expert as wide as a routed one, which their
# config.json does not name (Llama 4's feed-forward is a routed expert plus a shared one).
_SHARED_EXPERT_OF_EXPERT_WIDTH: Final = frozenset({"llama4", "llama4_text"})
_EXPERT_COUNT_KEYS: Final = ("num_local_experts", "num_experts", "n_routed_experts")
# The class default of a vocabulary a published config.json leaves out (Gemma 3's
# text_config: Gemma3TextConfig's 262,208).
_DEFAULT_VOCAB: Final = {"gemma3_text": 262_208}
# Model types whose config class ties the embeddings when config.json does not say.
_TIED_BY_DEFAULT: Final = frozenset({"gemma", "gemma2", "gemma3_text"})


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The dimensions of a model: `layers` decoder layers of width `hidden`, `heads`
    query heads and `kv_heads` key/value heads of `head_dim`, an MLP of `intermediate`
    (dense) or `experts` experts of `moe_intermediate` of which `experts_per_token` run
    per token (MoE), and a vocabulary of `vocab`."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    gated_mlp: bool = True
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_expert_intermediate: int = 0
    name: str = ""
    # The token mixers' parameters over all layers where they are not `heads` query and
    # `kv_heads` key/value projections of `head_dim` (MLA's low-rank projections, Mamba and
    # linear-attention layers): 0 for the plain attention formula.
    mixer_params: int = 0
    # An MoE model's leading layers with a dense MLP of `intermediate` instead of experts
    # (DeepSeek-V3's and Kimi-K2's first_k_dense_replace).
    dense_layers: int = 0

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"):
            value = getattr(self, field)
            if not _is_count(value) or value <= 0:
                raise ValueError(f"{self._label()}: {field} must be a positive integer")
        for field in (
            "intermediate",
            "experts",
            "experts_per_token",
            "moe_intermediate",
            "shared_expert_intermediate",
            "mixer_params",
            "dense_layers",
        ):
            value = getattr(self, field)
            if not _is_count(value) or value < 0:
                raise ValueError(f"{self._label()}: {field} must be a non-negative integer")
        if self.experts:
            if not 0 < self.experts_per_token <= self.experts:
                raise ValueError(
                    f"{self._label()}: experts_per_token must be between 1 and experts"
                )
            if self.moe_intermediate <= 0:
                raise ValueError(f"{self._label()}: an MoE model needs moe_intermediate > 0")
        elif self.intermediate <= 0:
            raise ValueError(f"{self._label()}: intermediate must be a positive integer")
        if self.dense_layers and (not self.experts or self.dense_layers >= self.layers):
            raise ValueError(
                f"{self._label()}: dense_layers needs an MoE model and fewer than layers"
            )
        if self.dense_layers and self.intermediate <= 0:
            raise ValueError(f"{self._label()}: dense layers need intermediate > 0")

    def _label(self) -> str:
        return self.name or "model shape"

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str = "") -> ModelShape:
        """The shape a Hugging Face `config.json` describes (its `text_config` for a
        multimodal model). Raises ValueError naming the first key that is missing or not
        a positive integer."""
        text = config.get("text_config")
        if isinstance(text, Mapping):
            # Multimodal configs keep the language model's numbers here; a few also copy
            # some of them to the top level, but the nested copy is the complete one.
            config = text
        keys = _ConfigKeys(config, name or "config.json")
        label = keys.label
        hidden = keys.required("hidden_size")
        heads = keys.required("num_attention_heads")
        layers = keys.required("num_hidden_layers")
        default_vocab = _DEFAULT_VOCAB.get(str(config.get("model_type")))
        vocab = keys.optional("vocab_size", default_vocab) if default_vocab else 0
        vocab = vocab or keys.required("vocab_size")
        kv_heads = keys.optional("num_key_value_heads", heads)
        if hidden % heads and config.get("head_dim") is None:
            raise ValueError(
                f"{label}: missing 'head_dim' and hidden_size {hidden} is not a multiple "
                f"of num_attention_heads {heads}"
            )
        head_dim = keys.optional("head_dim", hidden // heads)
        experts, experts_per_token, intermediate, moe_intermediate, shared = _mlp_widths(keys)
        tied = config.get("tie_word_embeddings", config.get("model_type") in _TIED_BY_DEFAULT)
        if not isinstance(tied, bool):
            raise ValueError(f"{label}: 'tie_word_embeddings' must be true or false")
        model_type = config.get("model_type")
        return cls(
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate=intermediate,
            vocab=vocab,
            tied_embeddings=tied,
            gated_mlp=model_type not in _PLAIN_MLP_TYPES,
            experts=experts,
            experts_per_token=experts_per_token,
            moe_intermediate=moe_intermediate,
            shared_expert_intermediate=shared,
            name=name,
            mixer_params=mixer_params(config),
            dense_layers=_dense_layers(keys, experts, layers),
        )

    def _mlp_params(self, experts: int) -> int:
        """Params of all layers' feed-forward parts with `experts` routed experts counted
        per MoE layer (all of them for residency, the ones a token runs for compute)."""
        matrices = 3 if self.gated_mlp else 2
        dense = matrices * self.hidden * self.intermediate
        if not self.is_moe:
            return self.layers * dense
        routed = experts * matrices * self.hidden * self.moe_intermediate
        shared = matrices * self.hidden * self.shared_expert_intermediate
        router = self.hidden * self.experts
        return self.moe_layers * (routed + shared + router) + self.dense_layers * dense

    def _attention_params(self) -> int:
        if self.mixer_params:
            return self.mixer_params // self.layers
        query_and_output = 2 * self.hidden * self.heads * self.head_dim
        key_and_value = 2 * self.hidden * self.kv_heads * self.head_dim
        return query_and_output + key_and_value

    def attention_params(self) -> int:
        """The token mixers' parameters (attention projections, or MLA's, Mamba's and
        linear attention's), all layers."""
        return self.layers * self._attention_params()

    def expert_params(self) -> int:
        """Every routed expert's parameters, all layers (0 for a dense model): the part of
        the weights a step reads only where its tokens route."""
        if not self.is_moe:
            return 0
        matrices = 3 if self.gated_mlp else 2
        return self.moe_layers * self.experts * matrices * self.hidden * self.moe_intermediate

    def routed_active_params(self) -> int:
        """The routed experts' parameters one token runs through, all layers (0 for a
        dense model): the part of `active_params` the fused MoE kernels multiply."""
        if not self.is_moe:
            return 0
        matrices = 3 if self.gated_mlp else 2
        per_layer = self.experts_per_token * matrices * self.hidden * self.moe_intermediate
        return self.moe_layers * per_layer

    def embedding_params(self) -> int:
        """The token embedding plus the LM head (one matrix when they are tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def params(self) -> int:
        """Every resident parameter: all experts of an MoE model count."""
        norms = 2 * self.hidden
        per_layer = self._attention_params() + norms
        body = self.layers * per_layer + self._mlp_params(self.experts)
        return body + self.embedding_params() + self.hidden

    def active_params(self) -> int:
        """Non-embedding parameters one token is multiplied through: the LM head and the
        embedding lookup are excluded (the step model counts the head once per sampled
        sequence, not per token); an MoE token runs only its `experts_per_token`."""
        norms = 2 * self.hidden
        per_layer = self._attention_params() + norms
        return self.layers * per_layer + self._mlp_params(self.experts_per_token) + self.hidden

    def kv_bytes_per_token(self, kv_bytes: float, tensor_parallel: int = 1) -> float:
        """KV cache bytes one token takes on one tensor-parallel rank. Ranks split the
        KV heads; with more ranks than KV heads each rank keeps a replica of one head."""
        if tensor_parallel < 1:
            raise ValueError("tensor_parallel must be at least 1")
        per_token = 2 * self.layers * self.kv_heads * self.head_dim * kv_bytes
        return per_token / min(tensor_parallel, self.kv_heads)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: object, key: str, label: str) -> int:
    # JSON has one number type: 4096.0 is as good a width as 4096.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{label}: {key!r} must be a positive integer, not {value!r}")
    return value


def _preset(
    name: str,
    *,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    vocab: int,
    tied: bool,
    head_dim: int = 0,
    experts: int = 0,
    experts_per_token: int = 0,
    moe_intermediate: int = 0,
) -> ModelShape:
    return ModelShape(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim or hidden // heads,
        intermediate=intermediate,
        vocab=vocab,
        tied_embeddings=tied,
        experts=experts,
        experts_per_token=experts_per_token,
        moe_intermediate=moe_intermediate,
        name=name,
    )


def _presets(*shapes: ModelShape) -> dict[str, ModelShape]:
    return {shape.name: shape for shape in shapes}


_LLAMA31_8B: Final = _preset(
    "meta-llama/Llama-3.1-8B-Instruct",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    intermediate=14336,
    vocab=128256,
    tied=False,
)
_LLAMA31_70B: Final = _preset(
    "meta-llama/Llama-3.1-70B-Instruct",
    layers=80,
    hidden=8192,
    heads=64,
    kv_heads=8,
    intermediate=28672,
    vocab=128256,
    tied=False,
)

# The numbers of each model's published config.json. Base and instruct releases of a
# model share one shape.
PRESETS: Final[Mapping[str, ModelShape]] = _presets(
    _LLAMA31_8B,
    replace(_LLAMA31_8B, name="meta-llama/Llama-3.1-8B"),
    _LLAMA31_70B,
    replace(_LLAMA31_70B, name="meta-llama/Llama-3.3-70B-Instruct"),
    _preset(
        "meta-llama/Llama-3.2-3B-Instruct",
        layers=28,
        hidden=3072,
        heads=24,
        kv_heads=8,
        head_dim=128,
        intermediate=8192,
        vocab=128256,
        tied=True,
    ),
    _preset(
        "Qwen/Qwen2.5-1.5B-Instruct",
        layers=28,
        hidden=1536,
        heads=12,
        kv_heads=2,
        intermediate=8960,
        vocab=151936,
        tied=True,
    ),
    _preset(
        "Qwen/Qwen2.5-7B-Instruct",
        layers=28,
        hidden=3584,
        heads=28,
        kv_heads=4,
        intermediate=18944,
        vocab=152064,
        tied=False,
    ),
    _preset(
        "Qwen/Qwen3-8B",
        layers=36,
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        intermediate=12288,
        vocab=151936,
        tied=False,
    ),
    _preset(
        "Qwen/Qwen3-14B",
        layers=40,
        hidden=5120,
        heads=40,
        kv_heads=8,
        head_dim=128,
        intermediate=17408,
        vocab=151936,
        tied=False,
    ),
    _preset(
        "Qwen/Qwen3-32B",
        layers=64,
        hidden=5120,
        heads=64,
        kv_heads=8,
        head_dim=128,
        intermediate=25600,
        vocab=151936,
        tied=False,
    ),
    _preset(
        "Qwen/Qwen3-30B-A3B",
        layers=48,
        hidden=2048,
        heads=32,
        kv_heads=4,
        head_dim=128,
        intermediate=6144,
        vocab=151936,
        tied=False,
        experts=128,
        experts_per_token=8,
        moe_intermediate=768,
    ),
    _preset(
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        intermediate=14336,
        vocab=32000,
        tied=False,
        experts=8,
        experts_per_token=2,
        moe_intermediate=14336,
    ),
)

_BY_BASENAME: Final = {key.rsplit("/", 1)[-1].lower(): shape for key, shape in PRESETS.items()}


def preset_for(model: str) -> ModelShape | None:
    """The preset of `model`: its exact hub id, else the last path part of `model`
    matched without regard to case (a local folder named after the model, a mirror's
    organisation)."""
    if (shape := PRESETS.get(model)) is not None:
        return shape
    return _BY_BASENAME.get(model.rstrip("/").rsplit("/", 1)[-1].lower())


class _ConfigKeys:
    """Reads a config.json's integers, naming the file and key of the first bad one."""

    def __init__(self, config: Mapping[str, Any], label: str) -> None:
        self.config = config
        self.label = label

    def required(self, key: str) -> int:
        if key not in self.config or self.config[key] is None:
            raise ValueError(f"{self.label}: missing {key!r}")
        return _positive(self.config[key], key, self.label)

    def optional(self, key: str, default: int) -> int:
        value = self.config.get(key)
        return default if value is None else _positive(value, key, self.label)


def _dense_layers(keys: _ConfigKeys, experts: int, layers: int) -> int:
    """An MoE model's leading dense layers (first_k_dense_replace), 0 for a dense model."""
    value = keys.config.get("first_k_dense_replace")
    if not experts or not value:
        return 0
    count = _positive(value, "first_k_dense_replace", keys.label)
    return min(count, layers - 1)


def _mlp_widths(keys: _ConfigKeys) -> tuple[int, int, int, int, int]:
    """(routed experts, experts per token, dense width, expert width, shared width); no
    experts for a dense model."""
    config, label = keys.config, keys.label
    experts = 0
    for key in _EXPERT_COUNT_KEYS:
        if config.get(key) is not None:
            experts = _positive(config[key], key, label)
            break
    intermediate = keys.optional("intermediate_size", 0)
    if experts <= 1:  # a single "expert" is a dense MLP
        return 0, 0, keys.required("intermediate_size"), 0, 0
    experts_per_token = keys.required("num_experts_per_tok")
    # Mixtral names its expert width intermediate_size; Qwen-MoE and DeepSeek give
    # moe_intermediate_size (their intermediate_size is a dense layer's).
    moe_intermediate = keys.optional("moe_intermediate_size", intermediate)
    if moe_intermediate <= 0:
        raise ValueError(f"{label}: missing 'moe_intermediate_size'")
    shared = keys.optional("shared_expert_intermediate_size", 0)
    if not shared and config.get("model_type") in _SHARED_EXPERT_OF_EXPERT_WIDTH:
        shared = moe_intermediate
    if not shared and config.get("n_shared_experts") is not None:
        shared = _positive(config["n_shared_experts"], "n_shared_experts", label)
        shared *= moe_intermediate
    return experts, experts_per_token, intermediate, moe_intermediate, shared
