"""The step engine's timing, set up once at start: the performance model and the KV blocks.

Under `--timing-model roofline` the model's shape comes from its config.json (a local
folder or the Hugging Face cache, where start-up has put it), else from a bundled preset
for well-known models; the GPU from --gpu and --gpu-spec-file, its step-model coefficients
changed by --timing-profile (and, for calibration, by coefficients passed in). The number
of KV blocks is
computed as vLLM computes it from the GPU memory share, unless --num-gpu-blocks-override
sets it. Under `--timing-model table` the step times come from --timing-table. With
--speculative-config a step also pays for its drafter (perf/speculative.py): under the
roofline model a draft head's share comes from the model's shape and a draft model's from
its own, when its config.json or a bundled shape is at hand. Anything missing or wrong is
a ConfigError with a one-line reason: the server does not start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from vllm_sim.config import Config, ConfigError
from vllm_sim.config.gpu import resolve_gpu
from vllm_sim.config.timing_profile import check_coefficients, load_timing_profile
from vllm_sim.engine.kvcache.cache import BlockCosts
from vllm_sim.model_files import find_model_folder, read_json
from vllm_sim.perf import (
    PRESETS,
    Drafter,
    GpuSpec,
    ModelShape,
    RooflineModel,
    SpeculativeDecoding,
    StepTimeModel,
    TableModel,
    draft_model_share,
    drafting_model,
    dtype_bytes,
    head_share,
    preset_for,
)
from vllm_sim.perf.kv_spec import (
    KvCacheLayout,
    LayerKind,
    LayerSpec,
    layer_specs,
    mla_shape,
    ssm_state_dtype_bytes,
)
from vllm_sim.perf.quant import WeightPrecision, quantization_config, weight_precision
from vllm_sim.perf.vision import VisionTower

GIB = float(1 << 30)
# vLLM 0.32's KV connectors that implement SupportsHMA (the hybrid KV cache manager);
# with any other (LMCache's, P2pNccl, the examples) vLLM turns the manager off.
_HMA_CONNECTORS = frozenset(
    {
        "OffloadingConnector",
        "SimpleCPUOffloadConnector",
        "NixlConnector",
        "MooncakeConnector",
        "MooncakeStoreConnector",
        "MoRIIOConnector",
        "HiSparseConnector",
        "DecodeBenchConnector",
        "ExampleHiddenStatesConnector",
    }
)


@dataclass(frozen=True, slots=True)
class StepTiming:
    model: StepTimeModel
    num_gpu_blocks: int  # the engine's blocks of --block-size tokens
    description: str  # for the start-up log
    warnings: tuple[str, ...] = ()  # for the start-up log, as warnings
    # The roofline model's KV cache as vLLM lays it out: its groups, the blocks of its
    # shared pool (vLLM's num_gpu_blocks) and the tokens it holds ("GPU KV cache size").
    kv_layout: KvCacheLayout | None = None
    pool_blocks: int = 0
    kv_cache_tokens: int = 0


Coefficients = Mapping[str, float]  # GpuSpec field names -> values


def step_timing(
    cfg: Config, environ: Mapping[str, str], coefficients: Coefficients | None = None
) -> StepTiming | None:
    """The step engine's timing for `cfg`; None under the constant (token clock) model.
    `coefficients` change the roofline model's GPU last, after --timing-profile: the
    calibration's candidates run through the same path as every server."""
    if cfg.timing_model == "constant":
        return None
    if cfg.timing_model == "table":
        return _table_timing(cfg)
    return _roofline_timing(cfg, environ, coefficients)


def timed_config(
    cfg: Config, environ: Mapping[str, str], coefficients: Coefficients | None = None
) -> tuple[Config, StepTiming | None]:
    """`cfg` as an instance runs it: under a step model, its KV blocks the model's; and the
    step timing (None under the constant model). ConfigError if the model cannot run."""
    timing = step_timing(cfg, environ, coefficients)
    if timing is None:
        return cfg, None
    return replace(cfg, kv_cache_size=timing.num_gpu_blocks), timing


def _table_timing(cfg: Config) -> StepTiming:
    path = Path(cfg.timing_table)
    try:
        if path.suffix.lower() == ".npz":
            table = TableModel.from_npz(path)
        else:
            table = TableModel.from_csv(path)
    except ValueError as error:
        raise ConfigError(f"timing-table: {error}") from None
    blocks = cfg.num_gpu_blocks_override or cfg.kv_cache_size
    description = f"step times from {path}, {blocks} KV blocks"
    spec = cfg.speculative
    if spec is None:
        return StepTiming(table, blocks, description)
    description += _speculation_text(spec, None)
    return StepTiming(drafting_model(table, spec), blocks, description)


def roofline_gpu(
    cfg: Config, coefficients: Coefficients | None = None
) -> tuple[GpuSpec, str, tuple[str, ...]]:
    """The GPU the roofline model times for `cfg`: --gpu, changed by --gpu-spec-file, then
    by --timing-profile, then by `coefficients`; with the start-up log's words for the
    profile ("" without one) and its warnings. ConfigError with a one-line reason."""
    try:
        gpu = resolve_gpu(cfg.gpu, cfg.gpu_spec_file)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    text = ""
    warnings: tuple[str, ...] = ()
    if cfg.timing_profile:
        try:
            profile = load_timing_profile(cfg.timing_profile)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        warning = profile.gpu_warning(gpu)
        warnings = () if warning is None else (warning,)
        gpu = profile.apply(gpu)
        text = f"; coefficients from {profile.describe()}"
    if coefficients:
        try:
            check_coefficients(coefficients, "coefficients")
        except ValueError as error:
            raise ConfigError(str(error)) from None
        gpu = replace(gpu, **coefficients)  # type: ignore[arg-type]
    return gpu, text, warnings


def _roofline_timing(
    cfg: Config, environ: Mapping[str, str], coefficients: Coefficients | None
) -> StepTiming:
    shape, source, config = _model(cfg, environ)
    tp = cfg.tensor_parallel_size
    if shape.heads % tp:
        # vLLM's refusal: each GPU takes a whole share of the attention heads.
        raise ConfigError(
            f"Total number of attention heads ({shape.heads}) must be divisible by tensor "
            f"parallel size ({tp})"
        )
    gpu, profile_text, warnings = roofline_gpu(cfg, coefficients)
    base_bytes = dtype_bytes(cfg.dtype)
    precision = _precision(cfg, config, base_bytes)
    # `auto` is the model's activation dtype, which weight quantization leaves as is.
    kv_dtype = cfg.dtype if cfg.kv_cache_dtype == "auto" else cfg.kv_cache_dtype
    try:
        kv_bytes = dtype_bytes(kv_dtype)
    except ValueError:
        raise ConfigError(
            f"--kv-cache-dtype {cfg.kv_cache_dtype} is not modelled by the roofline model "
            "(it knows auto, bfloat16, float16, float32 and the fp8 kinds)"
        ) from None
    layers: tuple[LayerSpec, ...] | None = None
    state_bytes = (base_bytes, base_bytes)
    if config is not None:
        try:
            layers = layer_specs(config)
            mla = mla_shape(config)
        except ValueError as error:
            raise ConfigError(f"{cfg.model} config.json: {error}") from None
        state_bytes = (base_bytes, ssm_state_dtype_bytes(config, base_bytes))
    else:
        mla = None
    roofline = RooflineModel(
        shape,
        gpu,
        tensor_parallel=tp,
        weight_bytes=precision.quantized_bytes if precision.is_quantized else base_bytes,
        kv_bytes=kv_bytes,
        compute_dtype="fp8" if precision.compute == "fp8" and gpu.fp8_tflops else "bf16",
        layers=layers,
        mla=mla,
        precision=precision,
        state_bytes=state_bytes,
        prefix_caching=cfg.enable_prefix_caching,
        hybrid_manager=_hybrid_manager(cfg),
        expert_parallel=tp * cfg.data_parallel_size if cfg.enable_expert_parallel else 1,
        data_parallel=cfg.data_parallel_size,
        vision=None if config is None else VisionTower.from_config(config),
    )
    try:
        layout = roofline.kv_layout(cfg.block_size)
    except ValueError as error:
        raise ConfigError(f"{cfg.model}: {error}") from None
    in_flight = 2 * cfg.max_num_batched_tokens  # async scheduling: two batches in flight
    budget = cfg.kv_cache_memory_bytes or None
    pool = roofline.num_gpu_blocks(
        cfg.block_size, cfg.gpu_memory_utilization, kv_cache_memory_bytes=budget
    )
    if cfg.num_gpu_blocks_override:
        pool = cfg.num_gpu_blocks_override
    tokens = layout.cache_tokens(pool, cfg.max_model_len, in_flight) if pool > 0 else 0
    blocks = pool
    if not _one_full_group(layout) and block_costs(layout, cfg.block_size) is None:
        # Groups the engine cannot hold block for block (a raised attention block size):
        # one block table of --block-size tokens, as many as vLLM's groups hold tokens
        # for requests of --max-model-len.
        blocks = cfg.num_gpu_blocks_override or tokens // cfg.block_size
    _check_room(cfg, roofline, blocks)
    weights = roofline.weight_bytes_total() / GIB
    memory = (
        f"{budget / GIB:.1f} GiB of KV cache (--kv-cache-memory-bytes)"
        if budget
        else f"{cfg.gpu_memory_utilization:g} of {gpu.name}'s memory"
    )
    description = (
        f"roofline timing of {shape.name or cfg.model} ({source}, {weights:.1f} GiB of weights"
        f"{_precision_text(precision)}) on {tp} x {gpu.name}{_parallel_text(roofline)}: "
        f"{_kinds_text(roofline.layers)}; "
        f"{layout.describe()}, {pool} blocks of {layout.block_size} tokens from {memory}: "
        f"GPU KV cache size {tokens:,} tokens; max {cfg.max_num_seqs} sequences, "
        f"{cfg.max_num_batched_tokens} tokens a step{profile_text}"
    )
    if blocks != pool:
        description += f" (the engine holds them as {blocks} blocks of {cfg.block_size} tokens)"
    spec = cfg.speculative
    model: StepTimeModel = roofline
    if spec is not None:
        share = _drafter_share(cfg, spec, shape, environ)
        model = drafting_model(roofline, spec, share)
        description += _speculation_text(spec, share)
    return StepTiming(model, blocks, description, warnings, layout, pool, tokens)


def _parallel_text(roofline: RooflineModel) -> str:
    """The start-up log's words for expert parallelism ("" without it)."""
    ep = roofline.expert_parallel
    if ep <= 1:
        return ""
    experts = roofline.shape.experts
    return (
        f", experts over {ep} GPUs ({experts / ep:g} each, data-parallel ranks "
        f"{roofline.data_parallel})"
    )


def _hybrid_manager(cfg: Config) -> bool | None:
    """False where the KV connector vLLM would run does not support the hybrid KV cache
    manager (VllmConfig turns it off; sliding layers are then allocated as full
    attention); None for vLLM's own rule (kv_spec.kv_cache_layout)."""
    transfer = cfg.kv_transfer_config or {}
    connector = transfer.get("kv_connector")
    if cfg.kv_offloading_size is not None:
        native = cfg.kv_offloading_backend == "native"
        connector = "OffloadingConnector" if native else "LMCacheMPConnector"
    if not connector:
        return None
    if connector == "MultiConnector":
        extra = transfer.get("kv_connector_extra_config")
        children = extra.get("connectors") if isinstance(extra, Mapping) else None
        names = [
            child.get("kv_connector")
            for child in (children if isinstance(children, list) else [])
            if isinstance(child, Mapping)
        ]
        return None if all(name in _HMA_CONNECTORS for name in names) else False
    return None if connector in _HMA_CONNECTORS else False


def roofline_of(step_model: StepTimeModel | None) -> RooflineModel | None:
    """The roofline model timing an engine (through a drafter's wrapper); None for any
    other step model."""
    model: object = step_model
    while hasattr(model, "target"):  # speculative decoding's DraftingStepModel
        model = model.target
    return model if isinstance(model, RooflineModel) else None


def engine_block_costs(cfg: Config, step_model: StepTimeModel | None) -> BlockCosts | None:
    """The engine's block costs (block_costs) under the roofline model; None otherwise."""
    model = roofline_of(step_model)
    if model is None:
        return None
    return block_costs(model.kv_layout(cfg.block_size), cfg.block_size)


def block_costs(layout: KvCacheLayout, block_size: int) -> BlockCosts | None:
    """What each of a sequence's token blocks costs in vLLM's shared block pool, for a
    model of several KV cache groups the engine holds block for block: at least one group
    keeps every token (its blocks are the prefix cache's), the others a sliding window or
    chunk (capped) or a state, all at --block-size tokens a block. None for one group of
    full attention (a block is a block) and where the engine cannot follow the groups (an
    attention block size vLLM raised for a Mamba hybrid, a model of windows only)."""
    groups = layout.groups
    if _one_full_group(layout) or layout.block_size != block_size:
        return None
    full = sum(1 for g in groups if g.kind in (LayerKind.FULL, LayerKind.MLA))
    if not full:
        return None
    capped: dict[int, int] = {}
    state = 0
    for group in groups:
        if group.kind.is_state:
            state += 1
        elif group.kind in (LayerKind.SLIDING, LayerKind.CHUNKED):
            cap = group.blocks_for(1 << 40)  # what a sequence of any length holds
            capped[cap] = capped.get(cap, 0) + 1
    return BlockCosts(full, tuple((n, cap) for cap, n in sorted(capped.items())), state)


def _one_full_group(layout: KvCacheLayout) -> bool:
    """A model whose every layer is full attention (or MLA): one group, whose blocks are
    the engine's blocks."""
    return len(layout.groups) == 1 and layout.groups[0].kind in (LayerKind.FULL, LayerKind.MLA)


def _precision(
    cfg: Config, config: Mapping[str, object] | None, base_bytes: float
) -> WeightPrecision:
    """The weights' precision: the config.json's quantization_config, else --quantization
    (which, for a bundled shape without a config.json, is taken as the checkpoint's)."""
    quant = quantization_config(config) if config is not None else None
    if quant is None and config is None and cfg.quantization:
        quant = {"quant_method": cfg.quantization}
    try:
        return weight_precision(quant, cfg.quantization, base_bytes)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _precision_text(precision: WeightPrecision) -> str:
    return f", {precision.describe()}" if precision.is_quantized else ""


def _kinds_text(layers: tuple[LayerSpec, ...]) -> str:
    """The layer kinds in words: "24 layers: 12 sliding window 128, 12 full attention"."""
    counts: dict[str, int] = {}
    for spec in layers:
        name = spec.kind.value
        if spec.kind in (LayerKind.SLIDING, LayerKind.CHUNKED):
            name += f" {spec.window}"
        counts[name] = counts.get(name, 0) + 1
    kinds = ", ".join(f"{count} {name}" for name, count in counts.items())
    return f"{len(layers)} layers ({kinds})"


def _drafter_share(
    cfg: Config, spec: SpeculativeDecoding, shape: ModelShape, environ: Mapping[str, str]
) -> float | None:
    """A draft pass against a decode step of the target: a head's from the target's shape,
    a draft model's from both shapes; None (the default share) if the draft's is unknown."""
    if spec.drafter is Drafter.HEAD:
        return head_share(shape)
    if spec.drafter is Drafter.LOOKUP or spec.draft_model is None:
        return None
    draft = _known_shape(spec.draft_model, cfg, environ)
    return None if draft is None else draft_model_share(draft, shape)


def _known_shape(name: str, cfg: Config, environ: Mapping[str, str]) -> ModelShape | None:
    """The shape of model `name` from its config.json or a bundled one; None if neither."""
    folder = find_model_folder(name, "", environ, cfg.download_dir)
    if folder is not None:
        try:
            config = read_json(folder / "config.json")
            if isinstance(config, dict):
                return ModelShape.from_config(config, name)
        except ValueError:
            pass  # an unreadable draft config: the default share
    return preset_for(name)


def _speculation_text(spec: SpeculativeDecoding, share: float | None) -> str:
    """The start-up log's words for the drafter."""
    text = f"; speculative decoding: {spec.method.value}, {spec.num_speculative_tokens} drafts"
    if spec.drafter is Drafter.LOOKUP:
        return text + " a step, drafted for free"
    cost = "the default share" if share is None else f"{share:.1%}"
    return text + f" a step, each drafted at {cost} of a decode step"


def model_shape(cfg: Config, environ: Mapping[str, str]) -> tuple[ModelShape, str]:
    """The model's shape and where it comes from: its config.json, else a preset."""
    shape, source, _ = _model(cfg, environ)
    return shape, source


def _model(
    cfg: Config, environ: Mapping[str, str]
) -> tuple[ModelShape, str, Mapping[str, object] | None]:
    """The model's shape, where it comes from, and its config.json (None for a preset)."""
    folder = find_model_folder(cfg.model, cfg.revision, environ, cfg.download_dir)
    if folder is not None:
        try:
            config = read_json(folder / "config.json")
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if isinstance(config, dict):
            try:
                return ModelShape.from_config(config, cfg.model), "config.json", config
            except ValueError as error:
                raise ConfigError(f"{folder / 'config.json'}: {error}") from None
    preset = preset_for(cfg.model)
    if preset is None:
        known = ", ".join(PRESETS)
        raise ConfigError(
            f"--timing-model roofline needs the model's config.json: no config.json of "
            f"{cfg.model!r} is on this machine, and it has no bundled shape (bundled: {known})"
        )
    return preset, "bundled shape", None


def _check_room(cfg: Config, roofline: RooflineModel, blocks: int) -> None:
    """vLLM's start-up refusal: the KV cache must hold one sequence of --max-model-len."""
    per_gpu = roofline.weight_bytes_per_gpu() / GIB
    if blocks <= 0 and cfg.kv_cache_memory_bytes:
        raise ConfigError(
            f"--kv-cache-memory-bytes {cfg.kv_cache_memory_bytes} holds no KV cache block of "
            f"this model; give it more"
        )
    if blocks <= 0:
        raise ConfigError(
            f"no memory is left for the KV cache: the weights take {per_gpu:.1f} GiB per GPU "
            f"of the {cfg.gpu_memory_utilization:g} share of {cfg.gpu}'s memory; try a "
            "larger --gpu-memory-utilization, --tensor-parallel-size or GPU"
        )
    tokens = blocks * cfg.block_size
    if tokens < cfg.max_model_len:
        raise ConfigError(
            f"the KV cache holds {tokens} tokens ({blocks} blocks), fewer than one sequence "
            f"of --max-model-len {cfg.max_model_len}; lower --max-model-len to {tokens} or "
            "give the cache more memory"
        )
