"""The closed-form step time: a roofline over one engine step.

A step multiplies every scheduled token through the model's weights and reads the whole
weight set plus each sequence's KV cache once. Its time is the larger of its compute
time (FLOPs at an efficiency of the tensor peak) and its memory time (weights and KV at
their own bandwidth efficiencies), plus fixed costs: the step's launch and scheduling,
a little per sequence, and the tensor-parallel all-reduces.

    FLOPs = 2 P_active T + 2 V h S + 4 L nh d (sum_prefill c (p + c/2) + sum_decode ctx)

T is every token scheduled, S the sequences that sample a token (vLLM computes logits for
the last position of each only), c a prefill chunk with p tokens already in the KV cache,
ctx a decoding sequence's context. A 16-bit weight read once serves 2 FLOPs per token of
the step, while an H100 does ~295 FLOPs in the time it reads a byte: decode-only steps are
memory-bound, and compute takes over only past 150-300 tokens a step, in prefill chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from vllm_sim.perf.gpus import GpuSpec
from vllm_sim.perf.kv_spec import KvCacheLayout, LayerKind, LayerSpec, MlaShape, kv_cache_layout
from vllm_sim.perf.quant import WeightPrecision, uniform_precision
from vllm_sim.perf.shape import ModelShape
from vllm_sim.perf.vision import VisionTower

ComputeDtype = Literal["bf16", "fp8"]

# Bytes per element of vLLM's --dtype and --kv-cache-dtype values. "auto" is the model's
# own dtype, 16-bit for every checkpoint this simulator knows.
_DTYPE_BYTES: Final[dict[str, float]] = {
    "auto": 2.0,
    "bfloat16": 2.0,
    "bf16": 2.0,
    "half": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "float": 4.0,
    "float32": 4.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
}
# Quantized checkpoints (FP8, AWQ, GPTQ) keep the embedding and the LM head in 16 bits.
_UNQUANTIZED_BYTES: Final = 2.0
# What vLLM holds back from the KV cache besides the weights, per rank: the activation
# peak of its profiling forward pass (grows with max_num_batched_tokens), the CUDA graph
# pool and non-PyTorch allocations (NCCL, cuBLAS workspaces). In set B's run (Llama-3.1-8B
# on an RTX PRO 6000 reporting 94.97 GiB, utilisation 0.92, 2048 batched tokens, graphs up
# to batch 256) the figure the reported 35,913 blocks imply is 2.3 GiB.
DEFAULT_ACTIVATION_RESERVE_BYTES: Final = 2.0 * (1 << 30)


def dtype_bytes(name: str) -> float:
    """Bytes per element of a vLLM `--dtype` or `--kv-cache-dtype` value."""
    size = _DTYPE_BYTES.get(name.strip().lower())
    if size is None:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(_DTYPE_BYTES)}")
    return size


@dataclass(slots=True)
class StepLoad:
    """What one engine step computes, summed over its sequences. The engine adds each
    scheduled sequence once (a decode, or a prefill chunk) and hands the sum to a step
    time model; a handful of integer additions per sequence keeps a 1,000-sequence step
    cheap."""

    prefill_tokens: int = 0  # prompt tokens scheduled this step, all chunks
    prefill_attention: float = 0.0  # sum of c (p + c/2): query-key pairs of the chunks
    prefill_kv_tokens: int = 0  # sum of p + c: KV the chunks' attention reads
    decode_seqs: int = 0
    decode_context: int = 0  # sum of each decoding sequence's context
    sampled: int = 0  # sequences producing a token at the end of this step
    requests: int = 0  # sequences scheduled
    # Speculative decoding: draft tokens the decoding sequences verify besides their
    # one decode token, and the sum of the contexts they attend to.
    draft_tokens: int = 0
    draft_context: int = 0
    # Multimodal prompts: the prompt tokens of the images the vision encoder runs on this
    # step, and the sum of each image's tokens squared (its attention among patches).
    encoder_tokens: int = 0
    encoder_pairs: float = 0.0

    def add_encoder(self, tokens: int, pairs: float) -> None:
        """Images standing for `tokens` prompt tokens go through the vision encoder."""
        self.encoder_tokens += tokens
        self.encoder_pairs += pairs

    def add_prefill(self, already: int, chunk: int, completes: bool) -> None:
        """A prefill chunk of `chunk` tokens after `already` tokens in the KV cache
        (computed before, or a prefix-cache hit); `completes` when it is the prompt's
        last chunk, whose final position samples the first output token."""
        self.prefill_tokens += chunk
        # Causal attention: the chunk's i-th token sees already + i keys.
        self.prefill_attention += chunk * (already + chunk * 0.5)
        self.prefill_kv_tokens += already + chunk
        self.requests += 1
        if completes:
            self.sampled += 1

    def add_decode(self, context: int) -> None:
        """One decode token of a sequence attending to `context` tokens (its KV cache
        including the token being decoded)."""
        self.decode_seqs += 1
        self.decode_context += context
        self.sampled += 1
        self.requests += 1

    def add_decodes(self, count: int, total_context: int) -> None:
        """`count` decode tokens at once, of sequences whose contexts sum to
        `total_context`: for an engine that keeps that sum as it goes, so a step costs
        the same whatever its batch."""
        self.decode_seqs += count
        self.decode_context += total_context
        self.sampled += count
        self.requests += count

    def add_drafts(self, count: int, total_context: int) -> None:
        """`count` draft tokens verified in this step, attending to `total_context` keys
        in all: more query positions of the decoding sequences, each sampled (vLLM
        computes logits at every position it verifies)."""
        self.draft_tokens += count
        self.draft_context += total_context

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs + self.draft_tokens

    @property
    def is_empty(self) -> bool:
        return self.requests == 0


class StepTimeModel(Protocol):
    """How long a step takes, from what it computes, and how long a request spends in the
    API server before the scheduler sees it."""

    def step_seconds(self, load: StepLoad) -> float: ...

    def admission_delay(self, prompt_tokens: int) -> float: ...


class RooflineModel:
    """Section 2 of the performance-model spec, with the terms the calibration set of real
    vLLM runs showed it needs: step time from a model's shape, a GPU's peaks and link, and
    the step model's coefficients (gpus.py). Immutable once built; every per-step
    constant is folded here so a step costs a few multiplications.

    A step lasts the larger of its compute and its memory traffic, plus its overheads:
    - compute: its FLOPs at `compute_efficiency` of the tensor peak (an MoE model's routed
      experts' at `moe_compute_efficiency`);
    - memory: the weights it streams (an MoE step only the experts its tokens route to)
      at `weight_bandwidth_efficiency` of the bandwidth, its KV reads at
      `kv_bandwidth_efficiency`;
    - overheads: `step_overhead_s`, `layer_overhead_s` per layer (and
      `moe_layer_overhead_s` per layer of an MoE model), `prefill_layer_overhead_s`
      per layer when it holds a prefill chunk, `per_request_overhead_s` per sequence, and
      under tensor parallelism two all-reduces a layer of the step's activations plus the
      gather of the sampled logits, each `allreduce_s` plus its bytes over the link.
    A request also spends `api_server_s` (+ `api_server_s_per_token` per prompt token) in
    vLLM's API server before the scheduler sees it: `admission_delay`.
    """

    __slots__ = (
        "_a2a_bytes_per_token",
        "_a2a_s_per_byte",
        "_activation_bytes_per_token",
        "_allreduce_s",
        "_collectives",
        "_context_s_per_token",
        "_decode_s_per_pair",
        "_expert_weight_s",
        "_experts",
        "_experts_per_token",
        "_fixed_s",
        "_kv_s_per_token",
        "_link_s_per_byte",
        "_logit_bytes_per_sample",
        "_per_request_s",
        "_prefill_fixed_s",
        "_prefill_s_per_pair",
        "_s_per_encoder_flop",
        "_s_per_sample",
        "_s_per_token",
        "_state_s_per_seq",
        "_state_s_per_token",
        "_weight_s",
        "_windows",
        "api_per_token_s",
        "api_s",
        "compute_dtype",
        "data_parallel",
        "expert_parallel",
        "gpu",
        "hybrid_manager",
        "kv_bytes",
        "layers",
        "mla",
        "precision",
        "prefix_caching",
        "shape",
        "state_bytes",
        "tensor_parallel",
        "vision",
        "weight_bytes",
    )

    def __init__(
        self,
        shape: ModelShape,
        gpu: GpuSpec,
        tensor_parallel: int = 1,
        weight_bytes: float = 2.0,
        kv_bytes: float = 2.0,
        compute_dtype: ComputeDtype = "bf16",
        full_cuda_graphs: bool = True,
        *,
        layers: Sequence[LayerSpec] | None = None,
        mla: MlaShape | None = None,
        precision: WeightPrecision | None = None,
        state_bytes: tuple[float, float] = (2.0, 2.0),
        prefix_caching: bool = True,
        hybrid_manager: bool | None = None,
        expert_parallel: int = 1,
        data_parallel: int = 1,
        vision: VisionTower | None = None,
    ) -> None:
        """`full_cuda_graphs`: decode-only steps replay one CUDA graph of the whole model,
        as vLLM's default (FULL_AND_PIECEWISE) does; False for piecewise graphs only (older
        vLLM's default), where every step launches each layer's attention outside the
        graph and pays what a prefill step pays per layer.

        `layers`: each layer's KV-cache spec (kv_spec.layer_specs of its config.json); by
        default every layer full attention of the shape's heads. `mla`: an MLA model's
        dimensions, for its attention FLOPs. `precision`: how the weights are quantized
        (quant.weight_precision); by default every linear layer at `weight_bytes`, at
        `compute_dtype`'s peak. `state_bytes`: bytes per element of a Mamba/linear layer's
        conv and SSM states. `prefix_caching` and `hybrid_manager` as vLLM's, for the KV
        cache groups (kv_spec.kv_cache_layout).

        `expert_parallel`: an MoE model's routed experts spread whole over that many GPUs
        (vLLM's --enable-expert-parallel: tensor_parallel x `data_parallel`) instead of
        split by tensor parallelism; the `data_parallel` attention ranks each schedule their
        own batch and, as vLLM runs them, step together, so the experts of this rank serve
        the tokens of every rank: taken as `data_parallel` times this rank's (ranks under a
        like load). Each MoE layer then sends each token to its experts and back (all-to-all
        dispatch and combine) instead of all-reducing its output.

        `vision`: a multimodal model's vision encoder, run in 16 bits at the dense compute
        efficiency on the images a step's prefill chunks begin."""
        if isinstance(tensor_parallel, bool) or tensor_parallel < 1:
            raise ValueError(f"tensor_parallel must be at least 1, not {tensor_parallel!r}")
        if not weight_bytes > 0 or not kv_bytes > 0:
            raise ValueError("weight_bytes and kv_bytes must be positive")
        if compute_dtype not in ("bf16", "fp8"):
            raise ValueError(f"compute_dtype must be bf16 or fp8, not {compute_dtype!r}")
        for name, size in (("expert_parallel", expert_parallel), ("data_parallel", data_parallel)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be a positive integer, not {size!r}")
        if expert_parallel > 1 and not shape.is_moe:
            expert_parallel = 1  # a dense model has no experts to spread
        self.expert_parallel = expert_parallel
        self.data_parallel = data_parallel
        self.shape = shape
        self.gpu = gpu
        self.tensor_parallel = tensor_parallel
        self.weight_bytes = weight_bytes
        self.kv_bytes = kv_bytes
        self.compute_dtype = compute_dtype
        if precision is None:
            precision = uniform_precision(weight_bytes, compute_dtype)
        self.precision = precision
        if layers is None:
            full = LayerSpec(
                LayerKind.FULL,
                kv_heads=shape.kv_heads,
                head_size=shape.head_dim,
                head_size_v=shape.head_dim,
            )
            layers = (full,) * shape.layers
        self.layers = tuple(layers)
        self.mla = mla
        self.state_bytes = state_bytes
        self.prefix_caching = prefix_caching
        self.hybrid_manager = hybrid_manager

        # Each part's matmuls at its own peak: a quantized part at its format's where the
        # GPU has it (FP8, FP4 tensor cores), else dequantized into 16-bit matmuls.
        def flops(quantized: bool, efficiency: float) -> float:
            peak = precision.peak_tflops(quantized, gpu.bf16_tflops, gpu.fp8_tflops, gpu.fp4_tflops)
            return peak * 1e12 * efficiency * tensor_parallel

        flops_per_s = flops(False, gpu.compute_efficiency)
        self.vision = vision
        self._s_per_encoder_flop = 1.0 / flops_per_s
        routed = shape.routed_active_params()
        mixers = shape.attention_params()
        rest = shape.active_params() - routed - mixers
        self._s_per_token = (
            2 * mixers / flops(precision.attention, gpu.compute_efficiency)
            + 2 * rest / flops(precision.dense, gpu.compute_efficiency)
            + 2 * routed / flops(precision.experts, gpu.moe_compute_efficiency)
        )
        self._s_per_sample = 2 * shape.vocab * shape.hidden / flops_per_s
        self._init_attention(flops_per_s)

        bandwidth = gpu.bandwidth_bytes_per_s * gpu.weight_bandwidth_efficiency
        expert_bytes = shape.expert_params() * precision.expert_bytes()
        self._weight_s = (self.weight_bytes_read() - expert_bytes) / tensor_parallel / bandwidth
        self._expert_weight_s = expert_bytes / self._expert_gpus() / bandwidth
        self._experts = shape.experts
        self._experts_per_token = shape.experts_per_token
        self._fixed_s = gpu.step_overhead_s + shape.layers * gpu.layer_overhead_s
        if shape.is_moe:
            self._fixed_s += shape.moe_layers * gpu.moe_layer_overhead_s
        self._prefill_fixed_s = shape.layers * gpu.prefill_layer_overhead_s
        if not full_cuda_graphs:
            self._fixed_s += self._prefill_fixed_s
            self._prefill_fixed_s = 0.0
        self._per_request_s = gpu.per_request_overhead_s
        self._init_communication()
        self.api_s = gpu.api_server_s
        self.api_per_token_s = gpu.api_server_s_per_token

    def _expert_gpus(self) -> int:
        """The GPUs one rank's routed experts are split over."""
        return self.expert_parallel if self.expert_parallel > 1 else self.tensor_parallel

    def _init_communication(self) -> None:
        """Tensor parallelism: a ring all-reduce moves 2 (n-1)/n of its message per GPU, a
        gather (n-1)/n; activations and logits travel in 16 bits. Each layer all-reduces
        twice (attention, MLP), and the step gathers its logits once. Under expert
        parallelism an MoE layer's MLP sends each token's activations to the GPUs of its
        k experts and back instead ((ep-1)/ep of them leave the GPU), split over the
        rank's tensor-parallel GPUs; each collective costs `allreduce_s` besides."""
        gpu, shape, tp, ep = self.gpu, self.shape, self.tensor_parallel, self.expert_parallel
        moe = shape.moe_layers if ep > 1 else 0
        allreduces = (2 * shape.layers - moe + 1) if tp > 1 else 0
        self._collectives = allreduces + 2 * moe
        self._allreduce_s = gpu.allreduce_s if self._collectives else 0.0
        if tp > 1:
            self._link_s_per_byte = (tp - 1) / tp / gpu.link_bytes_per_s(tp)
            self._activation_bytes_per_token = 2 * (2 * shape.layers - moe) * shape.hidden * 2.0
            self._logit_bytes_per_sample = 2.0 * shape.vocab
        else:
            self._link_s_per_byte = 0.0
            self._activation_bytes_per_token = self._logit_bytes_per_sample = 0.0
        if moe:
            self._a2a_s_per_byte = (ep - 1) / ep / gpu.link_bytes_per_s(ep)
            per_token = 2 * moe * shape.experts_per_token * shape.hidden * 2.0
            self._a2a_bytes_per_token = per_token / tp
        else:
            self._a2a_s_per_byte = self._a2a_bytes_per_token = 0.0

    def _init_attention(self, flops_per_s: float) -> None:
        """The per-kind constants of a step's attention: FLOPs per query-key pair and KV
        bytes per token read, for the layers that see every token (full attention, MLA)
        and, per window, for those that see at most a window (sliding, chunked local);
        and per sequence the states of Mamba and linear-attention layers."""
        gpu, tp, shape = self.gpu, self.tensor_parallel, self.shape
        kv_bandwidth = gpu.bandwidth_bytes_per_s * gpu.kv_bandwidth_efficiency
        standard = 4 * shape.heads * shape.head_dim
        prefill_pair = decode_pair = context = kv_bytes = 0.0
        windows: dict[int, list[float]] = {}
        state_seq = state_token = 0.0
        conv_bytes, ssm_bytes = self.state_bytes
        for spec in self.layers:
            if spec.kind.is_state:
                # A step reads and writes each scheduled sequence's state; a token's update
                # is a rank-1 change of the SSM state (a few FLOPs per element).
                size = spec.state_bytes(tp, conv_bytes, ssm_bytes)
                state_seq += 2 * size / kv_bandwidth
                state_token += 4 * spec.heads * spec.head_dim * spec.state_size / flops_per_s
                continue
            per_token = spec.bytes_per_token(tp, self.kv_bytes) / kv_bandwidth
            if spec.kind is LayerKind.MLA and self.mla is not None:
                prefill = self.mla.prefill_flops_per_pair() / flops_per_s
                decode = self.mla.decode_flops_per_pair() / flops_per_s
                context += self.mla.context_flops_per_token() / flops_per_s
            else:
                prefill = decode = standard / flops_per_s
            if spec.kind in (LayerKind.SLIDING, LayerKind.CHUNKED):
                terms = windows.setdefault(spec.window, [0.0, 0.0, 0.0])
                terms[0] += prefill
                terms[1] += decode
                terms[2] += per_token
            else:
                prefill_pair += prefill
                decode_pair += decode
                kv_bytes += per_token
        self._prefill_s_per_pair = prefill_pair
        self._decode_s_per_pair = decode_pair
        self._context_s_per_token = context
        self._kv_s_per_token = kv_bytes
        self._windows = tuple(
            (window, terms[0], terms[1], terms[2]) for window, terms in windows.items()
        )
        self._state_s_per_seq = state_seq
        self._state_s_per_token = state_token

    def admission_delay(self, prompt_tokens: int) -> float:
        """Seconds a request of `prompt_tokens` spends in vLLM's API server before its
        engine's scheduler may see it."""
        return self.api_s + prompt_tokens * self.api_per_token_s

    def _embedding_bytes(self) -> float:
        return max(self.precision.base_bytes, _UNQUANTIZED_BYTES)

    def weight_bytes_total(self) -> float:
        """Bytes of every weight, all ranks together: the embedding and LM head at 16 bits
        (or the model's dtype), the mixers, the dense MLP and the routed experts each at
        its precision."""
        shape, precision = self.shape, self.precision
        embeddings = shape.embedding_params()
        experts = shape.expert_params()
        mixers = shape.attention_params()
        rest = shape.params() - embeddings - experts - mixers
        return (
            embeddings * self._embedding_bytes()
            + mixers * precision.attention_bytes()
            + rest * precision.dense_bytes()
            + experts * precision.expert_bytes()
        )

    def weight_bytes_read(self) -> float:
        """Weight bytes a step streams, all ranks together: everything except the input
        embedding of an untied model, of which a step gathers only its tokens' rows (a
        tied model reads the same matrix whole as its LM head)."""
        total = self.weight_bytes_total()
        if self.shape.tied_embeddings:
            return total
        return total - self.shape.vocab * self.shape.hidden * self._embedding_bytes()

    def kv_bytes_per_token(self) -> float:
        """KV cache bytes of one token on one rank, every attention layer (full, sliding,
        chunked, MLA) as vLLM's specs size them; Mamba and linear-attention layers keep a
        state per sequence instead (kv_layout)."""
        return sum(
            spec.bytes_per_token(self.tensor_parallel, self.kv_bytes) for spec in self.layers
        )

    def kv_layout(self, block_size: int) -> KvCacheLayout:
        """vLLM's KV cache groups and block pool on one rank for `block_size`-token blocks."""
        conv_bytes, ssm_bytes = self.state_bytes
        return kv_cache_layout(
            self.layers,
            tensor_parallel=self.tensor_parallel,
            kv_bytes=self.kv_bytes,
            block_size=block_size,
            conv_bytes=conv_bytes,
            ssm_bytes=ssm_bytes,
            hybrid_manager=self.hybrid_manager,
            prefix_caching=self.prefix_caching,
        )

    def step_seconds(self, load: StepLoad) -> float:
        """Seconds one step of `load` takes; 0.0 for a step with nothing scheduled."""
        if load.requests == 0:
            return 0.0
        tokens = load.prefill_tokens + load.decode_seqs + load.draft_tokens
        # Verified drafts are more query positions of sequences whose KV the step reads
        # anyway: compute, and no memory traffic of their own.
        samples = load.sampled + load.draft_tokens
        linear = tokens * self._s_per_token + samples * self._s_per_sample
        weights = self._weight_s + self._expert_weight_s * self._experts_read(tokens)
        decode_pairs = load.decode_context + load.draft_context
        attention = (
            load.prefill_attention * self._prefill_s_per_pair
            + decode_pairs * self._decode_s_per_pair
            + (load.prefill_kv_tokens - load.prefill_tokens) * self._context_s_per_token
        )
        kv = (load.decode_context + load.prefill_kv_tokens) * self._kv_s_per_token
        if self._windows:
            attention_w, kv_w = self._windowed(load)
            attention += attention_w
            kv += kv_w
        if self._state_s_per_seq:
            kv += load.requests * self._state_s_per_seq
            linear += tokens * self._state_s_per_token
        if load.encoder_tokens and self.vision is not None:
            flops = self.vision.flops(load.encoder_tokens, load.encoder_pairs)
            linear += flops * self._s_per_encoder_flop
        # Compute and memory traffic overlap across the step: a step holding a prefill
        # chunk is bound by its FLOPs and hides the decodes' KV reads, a decode-only one
        # by its bytes. (Adding each kernel's own bound instead puts set B's saturated
        # replay 15% slow per token; on the calibration set the two are within 1%.)
        compute = linear + attention
        memory = weights + kv
        busy = compute if compute > memory else memory
        fixed = self._fixed_s + load.requests * self._per_request_s
        if load.prefill_tokens:
            fixed += self._prefill_fixed_s
        if self._collectives:
            fixed += self._communication_s(tokens, samples)
        return busy + fixed

    def _windowed(self, load: StepLoad) -> tuple[float, float]:
        """Attention seconds and KV-read seconds of the layers that see at most a window
        (sliding, chunked local). The load holds sums, not each sequence's context, so a
        window caps the sums: a decode reads min(window, context) tokens, taken over the
        step as min(window x decodes, sum of contexts), the same when every context is
        past the window (or all are equal) and an upper bound otherwise; a prefill chunk's
        queries each see at most the window, and it reads at most the window plus itself.
        A chunked layer is taken as a window of its chunk (an upper bound: it sees the
        current chunk only)."""
        prefills = load.requests - load.decode_seqs
        attention = kv = 0.0
        for window, prefill_pair, decode_pair, per_token in self._windows:
            decode_read = min(load.decode_context, window * load.decode_seqs)
            drafts = min(load.draft_context, window * load.draft_tokens)
            prefill_pairs = min(load.prefill_attention, window * load.prefill_tokens)
            prefill_read = min(load.prefill_kv_tokens, window * prefills + load.prefill_tokens)
            attention += prefill_pairs * prefill_pair + (decode_read + drafts) * decode_pair
            kv += (decode_read + prefill_read) * per_token
        return attention, kv

    def _experts_read(self, tokens: int) -> float:
        """The share of an MoE model's experts a step of `tokens` tokens reads (1.0 for a
        dense model, whose expert bytes are 0): each token routes to k of E experts,
        taken as uniform and independent, so an expert is idle with (1 - k/E)^tokens."""
        if self._experts == 0:
            return 1.0
        # Under expert parallelism the experts serve every data-parallel rank's tokens.
        routed = tokens * self.data_parallel if self.expert_parallel > 1 else tokens
        idle = (1.0 - self._experts_per_token / self._experts) ** routed
        return 1.0 - idle

    def _communication_s(self, tokens: int, sampled: int) -> float:
        """The step's collectives (_init_communication): their latencies, the tensor-
        parallel all-reduces' and logit gather's bytes over the server's link, and the
        expert-parallel dispatch and combine over the expert group's."""
        moved = tokens * self._activation_bytes_per_token + sampled * self._logit_bytes_per_sample
        sent = tokens * self._a2a_bytes_per_token
        return (
            self._collectives * self._allreduce_s
            + moved * self._link_s_per_byte
            + sent * self._a2a_s_per_byte
        )

    def kv_budget_bytes(
        self,
        gpu_memory_utilization: float,
        activation_reserve_bytes: float | None = None,
    ) -> float:
        """The KV cache memory of one rank as vLLM finds it at start-up: the share of the
        GPU's memory it may use, less the rank's weights and what its profiling run found
        other allocations need (activations, CUDA graphs; `activation_reserve_bytes`, by
        default DEFAULT_ACTIVATION_RESERVE_BYTES). Negative when the weights do not fit."""
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], not {gpu_memory_utilization!r}"
            )
        reserve = (
            DEFAULT_ACTIVATION_RESERVE_BYTES
            if activation_reserve_bytes is None
            else activation_reserve_bytes
        )
        if reserve < 0:
            raise ValueError("activation_reserve_bytes must not be negative")
        usable = self.gpu.memory_bytes * gpu_memory_utilization
        return usable - self.weight_bytes_per_gpu() - reserve

    def weight_bytes_per_gpu(self) -> float:
        """The weights one GPU holds: its tensor-parallel share, and of the routed experts
        its expert-parallel share."""
        experts = self.shape.expert_params() * self.precision.expert_bytes()
        rest = (self.weight_bytes_total() - experts) / self.tensor_parallel
        return rest + experts / self._expert_gpus()

    def num_gpu_blocks(
        self,
        block_size: int,
        gpu_memory_utilization: float,
        activation_reserve_bytes: float | None = None,
        kv_cache_memory_bytes: float | None = None,
    ) -> int:
        """KV cache blocks per rank, as vLLM sizes the cache at start-up: the rank's KV
        memory (kv_budget_bytes; `kv_cache_memory_bytes` instead when given, as vLLM's
        --kv-cache-memory-bytes, which skips the profiling) divided by the bytes of one
        block of the shared pool (kv_layout: `block_size` tokens of every layer's keys and
        values for a model of one layer kind; the largest group's pages for a hybrid
        one). 0 when the weights alone do not fit: vLLM then refuses to start, which is
        the caller's to report."""
        if isinstance(block_size, bool) or block_size < 1:
            raise ValueError(f"block_size must be a positive integer, not {block_size!r}")
        if kv_cache_memory_bytes is None:
            budget = self.kv_budget_bytes(gpu_memory_utilization, activation_reserve_bytes)
        else:
            budget = kv_cache_memory_bytes
        return self.kv_layout(block_size).num_blocks(budget)
