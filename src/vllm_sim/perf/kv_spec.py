"""Each layer's KV cache as vLLM's KV-cache specs define it, and the cache they share.

vLLM 0.32 (vllm/v1/kv_cache_interface.py) gives every attention layer a spec whose
`page_size_bytes` is what one block of `block_size` tokens takes on one GPU:

- full attention, sliding window, chunked local (FullAttentionSpec, SlidingWindowSpec,
  ChunkedLocalAttentionSpec): block_size x kv_heads_per_rank x (head_size + head_size_v) x
  dtype bytes, kv_heads_per_rank = max(1, kv_heads // tp);
- MLA (MLAAttentionSpec, DeepSeek-V2/V3, Kimi-K2): one latent per token, not split over TP:
  block_size x 1 x (kv_lora_rank + qk_rope_head_dim) x dtype bytes;
- Mamba/Mamba2 and linear attention (MambaSpec: Granite-4.0-H, Nemotron-H, Qwen3-Next's
  gated delta net): a state per sequence, the sum of its tensors' sizes (a conv state and
  an SSM state, vllm/model_executor/layers/mamba/mamba_utils.py), independent of tokens.

vllm/v1/core/kv_cache_utils.py then groups the layers: one group when every layer has the
same kind of spec (all full attention: the block holds every layer's page); else the pages
are unified (a smaller page's block_size scaled up, a Mamba page padded) and the layers split
into groups of equal size (the "1" of an n:1 pattern), each group a block table drawing from
one shared pool whose block is the largest group's pages. num_blocks = budget // that; the
start-up log's "GPU KV cache size: N tokens" is num_blocks over the blocks a request of
max_model_len needs in all groups, times max_model_len. For hybrid Mamba models vLLM first
raises the attention block size until an attention page is at least a Mamba page
(Platform._align_hybrid_block_size).

Pure arithmetic on config.json: no torch, nothing here reads files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final


class LayerKind(StrEnum):
    """What a layer keeps between steps, in vLLM's spec terms."""

    FULL = "full attention"
    SLIDING = "sliding window"
    CHUNKED = "chunked local attention"
    MLA = "MLA"
    MAMBA = "mamba"
    LINEAR = "linear attention"

    @property
    def is_state(self) -> bool:
        """A per-sequence state (MambaSpec), not per-token KV."""
        return self in (LayerKind.MAMBA, LayerKind.LINEAR)


# vLLM's smallest kernel block for FlashAttention-family backends (MultipleOf(16)): the
# alignment Platform._align_hybrid_block_size rounds a hybrid model's block size to.
KERNEL_BLOCK_ALIGNMENT: Final = 16
# MLA decode kernels want 128-token manager blocks in hybrid MLA/Mamba models.
MLA_KERNEL_BLOCK_ALIGNMENT: Final = 128

_MLA_TYPES: Final = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32"})
# Model types whose missing `sliding_window_pattern` means the class default.
_DEFAULT_PATTERN: Final = {"gemma3": 6, "gemma3_text": 6, "gemma2": 2}


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One decoder layer's cache, as its config.json describes it (all ranks together).

    Attention kinds: `kv_heads` heads of `head_size` keys and `head_size_v` values (MLA: one
    latent head of kv_lora_rank + qk_rope_head_dim, no values); `window` the sliding window
    or the attention chunk. State kinds: Mamba2 (`heads`, `head_dim`, `state_size`,
    `groups`, `conv_kernel`, `inner` = the mixer's width) or the gated delta net (`heads` value
    heads of `head_dim`, `groups` key heads of `state_size`, `conv_kernel`)."""

    kind: LayerKind
    kv_heads: int = 0
    head_size: int = 0
    head_size_v: int = 0
    window: int = 0
    inner: int = 0
    heads: int = 0
    head_dim: int = 0
    state_size: int = 0
    groups: int = 0
    conv_kernel: int = 0

    def kv_heads_per_rank(self, tensor_parallel: int) -> int:
        """vLLM's ModelConfig.get_num_kv_heads: max(1, heads // tp); MLA's one latent
        is on every rank."""
        if self.kind is LayerKind.MLA:
            return 1
        return max(1, self.kv_heads // tensor_parallel)

    def bytes_per_token(self, tensor_parallel: int, kv_bytes: float) -> float:
        """KV bytes one token takes in this layer on one rank (0 for a state layer):
        AttentionSpec.page_size_bytes / block_size."""
        if self.kind.is_state:
            return 0.0
        heads = self.kv_heads_per_rank(tensor_parallel)
        return heads * (self.head_size + self.head_size_v) * kv_bytes

    def state_bytes(self, tensor_parallel: int, conv_bytes: float, ssm_bytes: float) -> int:
        """Bytes of one sequence's state in this layer on one rank (0 for attention):
        MambaSpec.page_size_bytes, the conv state plus the SSM state."""
        tp = tensor_parallel
        if self.kind is LayerKind.MAMBA:
            # MambaStateShapeCalculator.mamba2_state_shape: groups are replicated up to
            # tp when they do not divide it; conv over inner + 2 groups x state.
            groups = self.groups + (0 if self.groups % tp == 0 else tp - self.groups)
            conv = (self.inner + 2 * groups * self.state_size) // tp * (self.conv_kernel - 1)
            ssm = self.heads // tp * self.head_dim * self.state_size
        elif self.kind is LayerKind.LINEAR:
            # gated_delta_net_state_shape: conv over 2 x keys + values; state (v_heads,
            # v_dim, k_dim).
            conv_dim = 2 * self.groups * self.state_size + self.heads * self.head_dim
            conv = conv_dim // tp * (self.conv_kernel - 1)
            ssm = self.heads // tp * self.head_dim * self.state_size
        else:
            return 0
        return int(conv * conv_bytes + ssm * ssm_bytes)


def _label(config: Mapping[str, Any]) -> str:
    return str(config.get("model_type") or "config.json")


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"{_label(config)}: missing {key!r}")
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{_label(config)}: {key!r} must be a positive integer, not {value!r}")
    return value


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config.json (its `text_config` when it has one)."""
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def layer_specs(config: Mapping[str, Any]) -> tuple[LayerSpec, ...]:
    """Every decoder layer's spec, in order, from a Hugging Face config.json (its
    `text_config` for a multimodal model), as vLLM's model files build them."""
    config = text_config(config)
    layers = _int(config, "num_hidden_layers")
    model_type = str(config.get("model_type") or "")
    if model_type in _MLA_TYPES or config.get("kv_lora_rank") is not None:
        latent = _int(config, "kv_lora_rank") + _int(config, "qk_rope_head_dim")
        return (LayerSpec(LayerKind.MLA, kv_heads=1, head_size=latent),) * layers
    kinds = _layer_kinds(config, layers, model_type)
    heads = _int(config, "num_attention_heads")
    attention = LayerSpec(
        LayerKind.FULL,
        kv_heads=_int(config, "num_key_value_heads", heads),
        head_size=_int(config, "head_dim", _int(config, "hidden_size") // heads),
    )
    attention = replace(attention, head_size_v=attention.head_size)
    specs: list[LayerSpec] = []
    for kind in kinds:
        if kind is LayerKind.FULL:
            specs.append(attention)
        elif kind is LayerKind.SLIDING:
            specs.append(replace(attention, kind=kind, window=_int(config, "sliding_window")))
        elif kind is LayerKind.CHUNKED:
            chunk = _int(config, "attention_chunk_size")
            specs.append(replace(attention, kind=kind, window=chunk))
        elif kind is LayerKind.MAMBA:
            specs.append(_mamba_spec(config))
        else:
            specs.append(_linear_spec(config))
    return tuple(specs)


_LAYER_TYPE_NAMES: Final = {
    "full_attention": LayerKind.FULL,
    "attention": LayerKind.FULL,
    "sliding_attention": LayerKind.SLIDING,
    "chunked_attention": LayerKind.CHUNKED,
    "linear_attention": LayerKind.LINEAR,
    "mamba": LayerKind.MAMBA,
    "mamba2": LayerKind.MAMBA,
}


def _layer_kinds(config: Mapping[str, Any], layers: int, model_type: str) -> list[LayerKind]:
    label = _label(config)
    if model_type == "gpt_oss":
        # vLLM's gpt_oss.py: sliding window on every even layer, whatever layer_types say.
        return [LayerKind.SLIDING if i % 2 == 0 else LayerKind.FULL for i in range(layers)]
    if model_type.startswith("llama4") and config.get("attention_chunk_size"):
        # llama4.py: a layer that uses RoPE (no_rope_layers[i] == 1) attends in chunks;
        # the NoPE ones attend to everything. Missing: a NoPE layer every 4th.
        interval = _int(config, "no_rope_layer_interval", 4)
        rope = config.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
        return [LayerKind.CHUNKED if rope[i] else LayerKind.FULL for i in range(layers)]
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        # Nemotron-H: M a Mamba layer, * attention, - an MLP, E an MoE (no cache).
        kinds = []
        for char in pattern:
            if char == "M":
                kinds.append(LayerKind.MAMBA)
            elif char == "*":
                kinds.append(LayerKind.FULL)
        return kinds
    types = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(types, Sequence) and not isinstance(types, str) and types:
        if len(types) < layers:
            raise ValueError(f"{label}: layer_types has {len(types)} entries for {layers} layers")
        # A kind this model does not know is taken as full attention (its upper bound).
        return [_LAYER_TYPE_NAMES.get(str(name), LayerKind.FULL) for name in types[:layers]]
    if model_type == "qwen3_next" and config.get("full_attention_interval"):
        step = _int(config, "full_attention_interval")
        return [LayerKind.FULL if (i + 1) % step == 0 else LayerKind.LINEAR for i in range(layers)]
    window = config.get("sliding_window")
    if window and config.get("use_sliding_window", True) is not False:
        pattern_every = config.get("sliding_window_pattern") or _DEFAULT_PATTERN.get(model_type)
        if pattern_every:
            # Gemma 2/3: every pattern-th layer is global.
            every = _int({"sliding_window_pattern": pattern_every}, "sliding_window_pattern")
            return [
                LayerKind.FULL if (i + 1) % every == 0 else LayerKind.SLIDING for i in range(layers)
            ]
        return [LayerKind.SLIDING] * layers  # Mistral: every layer windowed
    return [LayerKind.FULL] * layers


def _mamba_spec(config: Mapping[str, Any]) -> LayerSpec:
    if config.get("mamba_n_heads") is not None:  # Granite-4.0-H (granitemoehybrid)
        heads = _int(config, "mamba_n_heads")
        return LayerSpec(
            LayerKind.MAMBA,
            inner=_int(config, "mamba_expand", 2) * _int(config, "hidden_size"),
            heads=heads,
            head_dim=_int(config, "mamba_d_head"),
            state_size=_int(config, "mamba_d_state"),
            groups=_int(config, "mamba_n_groups", 1),
            conv_kernel=_int(config, "mamba_d_conv", 4),
        )
    heads = _int(config, "mamba_num_heads")  # Nemotron-H
    head_dim = _int(config, "mamba_head_dim")
    return LayerSpec(
        LayerKind.MAMBA,
        inner=heads * head_dim,
        heads=heads,
        head_dim=head_dim,
        state_size=_int(config, "ssm_state_size"),
        groups=_int(config, "n_groups", 1),
        conv_kernel=_int(config, "conv_kernel", 4),
    )


def _linear_spec(config: Mapping[str, Any]) -> LayerSpec:
    return LayerSpec(  # Qwen3-Next's gated delta net
        LayerKind.LINEAR,
        heads=_int(config, "linear_num_value_heads"),
        head_dim=_int(config, "linear_value_head_dim"),
        groups=_int(config, "linear_num_key_heads"),
        state_size=_int(config, "linear_key_head_dim"),
        conv_kernel=_int(config, "linear_conv_kernel_dim", 4),
    )


@dataclass(frozen=True, slots=True)
class MlaShape:
    """An MLA layer's dimensions (DeepSeek-V2/V3, Kimi-K2): `heads` query heads, a latent
    of `kv_lora_rank` plus `rope` shared rotary dims per token, per-head `nope` + `rope`
    query/key dims and `v_head_dim` values."""

    heads: int
    kv_lora_rank: int
    nope: int
    rope: int
    v_head_dim: int

    def decode_flops_per_pair(self) -> int:
        """FLOPs per query-key pair of a decode token in the absorbed form vLLM's MLA
        backends decode with: scores over the latent and rotary dims, values over the
        latent, every head."""
        return self.heads * (2 * (self.kv_lora_rank + self.rope) + 2 * self.kv_lora_rank)

    def prefill_flops_per_pair(self) -> int:
        """FLOPs per query-key pair of a prefill token, which vLLM computes as multi-head
        attention over keys of nope + rope and values of v_head_dim."""
        return self.heads * (2 * (self.nope + self.rope) + 2 * self.v_head_dim)

    def context_flops_per_token(self) -> int:
        """FLOPs to expand one cached token's latent into every head's key and value
        (kv_b_proj) for a prefill chunk that attends to it."""
        return 2 * self.kv_lora_rank * self.heads * (self.nope + self.v_head_dim)


def mla_shape(config: Mapping[str, Any]) -> MlaShape | None:
    """The MLA dimensions of a config.json; None for a model without MLA."""
    config = text_config(config)
    if config.get("kv_lora_rank") is None:
        return None
    return MlaShape(
        heads=_int(config, "num_attention_heads"),
        kv_lora_rank=_int(config, "kv_lora_rank"),
        nope=_int(config, "qk_nope_head_dim"),
        rope=_int(config, "qk_rope_head_dim"),
        v_head_dim=_int(config, "v_head_dim"),
    )


def mixer_params(config: Mapping[str, Any]) -> int:
    """The token mixers' parameters over all layers, for a model whose mixers are not all
    plain q/k/v/o attention (MLA, Mamba, linear attention); 0 otherwise."""
    config = text_config(config)
    specs = layer_specs(config)
    kinds = {spec.kind for spec in specs}
    if not kinds & {LayerKind.MLA, LayerKind.MAMBA, LayerKind.LINEAR}:
        return 0
    hidden = _int(config, "hidden_size")
    total = 0
    mla = mla_shape(config)
    for spec in specs:
        if spec.kind is LayerKind.MLA and mla is not None:
            q_dims = mla.heads * (mla.nope + mla.rope)
            q_rank = config.get("q_lora_rank")
            query = hidden * q_dims if not q_rank else hidden * int(q_rank) + int(q_rank) * q_dims
            latent = hidden * (mla.kv_lora_rank + mla.rope)
            expand = mla.kv_lora_rank * mla.heads * (mla.nope + mla.v_head_dim)
            total += query + latent + expand + mla.heads * mla.v_head_dim * hidden
        elif spec.kind is LayerKind.MAMBA:
            projected = 2 * spec.inner + 2 * spec.groups * spec.state_size + spec.heads
            total += hidden * projected + spec.inner * hidden
        elif spec.kind is LayerKind.LINEAR:
            keys, values = spec.groups * spec.state_size, spec.heads * spec.head_dim
            total += hidden * (2 * keys + 2 * values + 2 * spec.heads) + values * hidden
        else:
            heads = _int(config, "num_attention_heads")
            total += (
                2 * hidden * heads * spec.head_size + 2 * hidden * spec.kv_heads * spec.head_size
            )
    return total


def ssm_state_dtype_bytes(config: Mapping[str, Any], model_bytes: float) -> float:
    """Bytes per element of a Mamba layer's SSM state: vLLM's --mamba-ssm-cache-dtype
    `auto` is the model's dtype, except Nemotron-H's (its config's mamba_ssm_cache_dtype,
    float32 when absent: NemotronHForCausalLMConfig) and Qwen3.5's (its mamba_ssm_dtype)."""
    config = text_config(config)
    name = config.get("mamba_ssm_cache_dtype") or config.get("mamba_ssm_dtype")
    if name is None and str(config.get("model_type")) == "nemotron_h":
        name = "float32"
    if name is None:
        return model_bytes
    return 4.0 if str(name) in ("float32", "float") else 2.0


@dataclass(frozen=True, slots=True)
class KvGroup:
    """One KV cache group: `layers` layers of one spec (padding layers included) sharing a
    block table, each page `page_bytes` (per rank) for `block_size` tokens."""

    spec: LayerSpec
    layers: int
    block_size: int
    page_bytes: int

    @property
    def kind(self) -> LayerKind:
        return self.spec.kind

    def blocks_for(self, tokens: int, max_in_flight: int = 0) -> int:
        """Blocks a sequence of `tokens` tokens holds in this group: all its tokens under
        full attention and MLA; under a sliding window the last window - 1 plus the
        tokens in flight, and one more as the window need not start on a block (vLLM's
        SlidingWindowSpec); the current chunk under chunked local attention; the state
        (one block) for Mamba and linear attention."""
        if tokens <= 0:
            return 0
        size = self.block_size
        if self.kind.is_state:
            return 1
        if self.kind is LayerKind.SLIDING:
            return min(_cdiv(tokens, size), _cdiv(self.spec.window - 1 + max_in_flight, size) + 1)
        if self.kind is LayerKind.CHUNKED:
            return min(_cdiv(tokens, size), _cdiv(self.spec.window + max_in_flight, size))
        return _cdiv(tokens, size)

    def max_blocks_per_request(self, max_model_len: int, max_in_flight: int, align: bool) -> int:
        """cdiv(spec.max_memory_usage_bytes, page_size_bytes): the blocks one request of
        max_model_len takes in this group (Mamba: 2 in `align` mode, with prefix caching)."""
        size = self.block_size
        if self.kind.is_state:
            return 2 if align else 1
        if self.kind is LayerKind.SLIDING:
            return _cdiv(min(self.spec.window - 1 + max_in_flight, max_model_len), size) + 1
        if self.kind is LayerKind.CHUNKED:
            return _cdiv(min(self.spec.window + max_in_flight, max_model_len), size)
        return _cdiv(max_model_len, size)


@dataclass(frozen=True, slots=True)
class KvCacheLayout:
    """How vLLM lays out one rank's KV cache for a model: its groups, the bytes of one
    block of the shared pool (every group's block id names that much memory), and the
    attention block size (raised for hybrid Mamba models)."""

    groups: tuple[KvGroup, ...]
    block_bytes: int
    block_size: int
    hybrid_manager: bool
    mamba_align: bool  # Mamba's `align` cache mode (prefix caching on): 2 blocks a request

    def num_blocks(self, budget_bytes: float) -> int:
        """Blocks of the pool `budget_bytes` of KV memory hold (per rank):
        available_memory // bytes_per_block, as get_kv_cache_config_from_groups."""
        if budget_bytes <= 0 or not self.groups:
            return 0
        return int(budget_bytes // self.block_bytes)

    def blocks_per_request(self, max_model_len: int, max_in_flight: int) -> int:
        """Blocks of the pool one request of max_model_len holds in all groups together."""
        return sum(
            group.max_blocks_per_request(max_model_len, max_in_flight, self.mamba_align)
            for group in self.groups
        )

    def max_concurrency(self, num_blocks: int, max_model_len: int, max_in_flight: int) -> float:
        """get_max_concurrency_for_kv_cache_config: num_blocks over the blocks a request of
        max_model_len needs in every group (0 for a model without a KV cache)."""
        per_request = self.blocks_per_request(max_model_len, max_in_flight)
        return num_blocks / per_request if per_request else 0.0

    def cache_tokens(self, num_blocks: int, max_model_len: int, max_in_flight: int) -> int:
        """The token figure of vLLM's start-up log, "GPU KV cache size: N tokens":
        int(max concurrency x max_model_len)."""
        concurrency = self.max_concurrency(num_blocks, max_model_len, max_in_flight)
        return int(concurrency * max_model_len)

    def blocks_for(self, tokens: int, max_in_flight: int = 0) -> int:
        """Blocks of the shared pool a sequence of `tokens` tokens holds, all groups: what a
        group-aware engine would allocate for it."""
        return sum(group.blocks_for(tokens, max_in_flight) for group in self.groups)

    def describe(self) -> str:
        """The groups in words for the start-up log."""
        parts = []
        for group in self.groups:
            text = f"{group.layers} x {group.kind.value}"
            if group.kind in (LayerKind.SLIDING, LayerKind.CHUNKED):
                text += f" {group.spec.window}"
            parts.append(text)
        counted: dict[str, int] = {}
        for part in parts:
            counted[part] = counted.get(part, 0) + 1
        words = ", ".join(
            part if count == 1 else f"{count} groups of {part}" for part, count in counted.items()
        )
        return f"{len(self.groups)} KV cache group{'s' * (len(self.groups) != 1)} ({words})"


def kv_cache_layout(
    specs: Sequence[LayerSpec],
    *,
    tensor_parallel: int,
    kv_bytes: float,
    block_size: int,
    conv_bytes: float = 2.0,
    ssm_bytes: float = 2.0,
    hybrid_manager: bool | None = None,
    prefix_caching: bool = True,
) -> KvCacheLayout:
    """vLLM's KV cache groups for `specs` on one rank of `tensor_parallel`.

    `hybrid_manager`: vLLM's hybrid KV cache manager; None for vLLM's default, which turns
    it off when the model has chunked local attention (Llama 4: VllmConfig, unless
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1). Off, sliding-window and chunked
    layers are allocated as full attention (unify_hybrid_kv_cache_specs)."""
    if not specs:
        return KvCacheLayout((), 1, block_size, False, False)
    kinds = {spec.kind for spec in specs}
    if hybrid_manager is None:
        hybrid_manager = LayerKind.CHUNKED not in kinds
    if not hybrid_manager and len(kinds) > 1 and any(kind.is_state for kind in kinds):
        # _promote_local_kv_cache_specs: a state cannot be allocated as full attention.
        raise ValueError(
            "Failed to promote local KV cache specs to one unified type: a model with "
            "Mamba or linear-attention layers needs the hybrid KV cache manager"
        )
    if not hybrid_manager and kinds & {LayerKind.FULL, LayerKind.MLA}:
        specs = [
            replace(spec, kind=LayerKind.FULL, window=0)
            if spec.kind in (LayerKind.SLIDING, LayerKind.CHUNKED)
            else spec
            for spec in specs
        ]
        kinds = {spec.kind for spec in specs}
    tp = tensor_parallel
    has_state = any(kind.is_state for kind in kinds)
    attention_pages = {
        spec.bytes_per_token(tp, kv_bytes) for spec in specs if not spec.kind.is_state
    }
    state_pages = {
        spec.state_bytes(tp, conv_bytes, ssm_bytes) for spec in specs if spec.kind.is_state
    }
    if has_state and attention_pages:
        # Platform._align_hybrid_block_size: the smallest multiple of the kernel block that
        # makes an attention page at least the largest state page; the state page is then
        # padded to the attention page.
        per_token = max(attention_pages)
        align = max(
            MLA_KERNEL_BLOCK_ALIGNMENT if LayerKind.MLA in kinds else KERNEL_BLOCK_ALIGNMENT,
            block_size,
        )
        needed = align * _cdiv(max(state_pages), int(align * per_token))
        block_size = max(block_size, needed)
    pages = [
        int(spec.state_bytes(tp, conv_bytes, ssm_bytes))
        if spec.kind.is_state
        else int(spec.bytes_per_token(tp, kv_bytes) * block_size)
        for spec in specs
    ]
    mamba_align = has_state and prefix_caching
    if len(kinds) == 1:
        # One kind (UniformTypeKVCacheSpecs): one group, a block holds every layer's page.
        group = KvGroup(specs[0], len(specs), block_size, max(pages))
        return KvCacheLayout((group,), sum(pages), block_size, hybrid_manager, mamba_align)
    # unify_kv_cache_spec_page_size: the largest page wins; smaller attention pages that
    # divide it scale their block size, state pages are padded.
    largest = max(pages)
    unified: list[tuple[LayerSpec, int]] = []
    for spec, page in zip(specs, pages, strict=True):
        size = block_size
        if page != largest and not spec.kind.is_state:
            if largest % page:
                raise ValueError(
                    "KV cache page sizes cannot be unified: a layer's page does not divide "
                    "the largest"
                )
            size = block_size * (largest // page)
        unified.append((spec, size))
    # _get_kv_cache_groups_uniform_page_size: buckets of equal specs, split into groups of
    # the smallest bucket's size (the largest when within 1.5x), the last padded.
    buckets: dict[tuple[LayerSpec, int], int] = {}
    for key in unified:
        buckets[key] = buckets.get(key, 0) + 1
    smallest, biggest = min(buckets.values()), max(buckets.values())
    group_size = biggest if biggest < smallest * 1.5 else smallest
    groups: list[KvGroup] = []
    for (spec, size), count in buckets.items():
        # layers[i::n]: the first count % n groups take one layer more.
        n = _cdiv(count, group_size)
        for i in range(n):
            layers = count // n + (1 if i < count % n else 0)
            groups.append(KvGroup(spec, layers, size, largest))
    return KvCacheLayout(
        tuple(groups),
        max(group.layers for group in groups) * largest,
        block_size,
        hybrid_manager,
        mamba_align,
    )


def _cdiv(a: int | float, b: int) -> int:
    return math.ceil(a / b) if b else 0
