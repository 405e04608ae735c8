"""--speculative-config, read as vLLM reads it into its SpeculativeConfig: the method (given,
or inferred from `model` as vLLM infers it), the draft tokens per step, the draft model.

Only what the simulator acts on is checked; other keys (`draft_tensor_parallel_size`,
`quantization`, `disable_by_batch_size`, ...) are accepted and ignored. The simulator reads
no draft model's config.json, so a method that vLLM would let take its draft count from
one (`n_predict`) needs `num_speculative_tokens` here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from vllm_sim.perf import SpecMethod, SpeculativeDecoding

# Far above any drafter in use; keeps the per-position counters and step budgets sane.
MAX_SPECULATIVE_TOKENS: Final = 128
# vLLM's default of suffix_decoding_max_tree_depth, suffix decoding's draft count.
SUFFIX_TREE_DEPTH: Final = 24
# Methods that need a `model` (a draft model, the weights of a draft head, a proposer's
# import path); mtp and dspark without one use the target's own weights.
_NEED_MODEL: Final = frozenset(
    {
        SpecMethod.DRAFT_MODEL,
        SpecMethod.EAGLE,
        SpecMethod.EAGLE3,
        SpecMethod.MEDUSA,
        SpecMethod.MLP_SPECULATOR,
        SpecMethod.DFLASH,
        SpecMethod.CUSTOM_CLASS,
    }
)
# Methods whose `model` names weights the drafter runs.
_DRAFT_WEIGHTS: Final = _NEED_MODEL - {SpecMethod.CUSTOM_CLASS} | {
    SpecMethod.MTP,
    SpecMethod.DSPARK,
}
_NGRAM_NAMES: Final = ("ngram", "[ngram]")
_METHODS: Final = ", ".join(method.value for method in SpecMethod)


def parse_speculative_config(data: object) -> SpeculativeDecoding:
    """The speculative decoding `data` (the flag's JSON) describes; ValueError with a
    one-line reason if vLLM would refuse it or the simulator cannot run it."""
    if not isinstance(data, Mapping):
        raise ValueError('it must be a JSON object, such as {"method": "ngram", ...}')
    model = _optional_text(data, "model")
    method = _method(data, model)
    count = _num_speculative_tokens(data, method, model)
    if model is None and method in _NEED_MODEL:  # mtp without one: the target's own layers
        raise ValueError("num_speculative_tokens was provided but without speculative model.")
    if method in (SpecMethod.NGRAM, SpecMethod.NGRAM_GPU):
        _check_lookup(data)
    draft = model if method in _DRAFT_WEIGHTS else None
    return SpeculativeDecoding(method, count, draft)


def speculative_config_error(data: object) -> str | None:
    """Why `data` cannot be used, or None (no flag, or a good one)."""
    if data is None:
        return None
    try:
        parse_speculative_config(data)
    except ValueError as error:
        return f"invalid speculative-config: {error}"
    return None


def _optional_text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key} must be a string, not {value!r}")
    return value


def _method(data: Mapping[str, Any], model: str | None) -> SpecMethod:
    """The given method (vLLM's deprecated `*_mtp` model types are `mtp`, `[ngram]` is
    `ngram`), or the one vLLM infers from `model`'s name."""
    name = _optional_text(data, "method")
    if name is None:
        return _inferred(model)
    if name in _NGRAM_NAMES:
        return SpecMethod.NGRAM
    if name.endswith("_mtp"):
        return SpecMethod.MTP
    try:
        return SpecMethod(name)
    except ValueError:
        raise ValueError(f"unknown method {name!r}; known: {_METHODS}") from None


# Parts of a draft model's name that tell its method, in the order vLLM tries them (it
# also reads the draft's config.json, which the simulator does not: a Medusa checkpoint is
# known here by its name only).
_NAMED_METHODS: Final = (
    ("eagle-", SpecMethod.EAGLE),
    ("eagle3", SpecMethod.EAGLE3),
    ("dflash", SpecMethod.DFLASH),
    ("dspark", SpecMethod.DSPARK),
    ("medusa", SpecMethod.MEDUSA),
)


def _inferred(model: str | None) -> SpecMethod:
    if model is None:
        raise ValueError("it needs a method or a model")
    if model in _NGRAM_NAMES:
        return SpecMethod.NGRAM
    if _is_import_path(model):
        return SpecMethod.CUSTOM_CLASS
    lowered = model.lower()
    for part, method in _NAMED_METHODS:
        if part in lowered:
            return method
    return SpecMethod.DRAFT_MODEL


def _is_import_path(model: str) -> bool:
    """`package.Proposer`: a dotted Python path, not a URL or a hub id."""
    if "/" in model or "://" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def _num_speculative_tokens(data: Mapping[str, Any], method: SpecMethod, model: str | None) -> int:
    value = data.get("num_speculative_tokens")
    if value is None:
        if method is SpecMethod.SUFFIX:  # suffix decoding drafts up to its tree depth
            value = data.get("suffix_decoding_max_tree_depth", SUFFIX_TREE_DEPTH)
            return _positive(value, "suffix_decoding_max_tree_depth")
        if model is not None:
            raise ValueError(
                "A speculative model was provided, but `num_speculative_tokens` was not "
                "provided (the simulator reads no draft model config)"
            )
        raise ValueError(f"num_speculative_tokens is required with method {method.value}")
    return _positive(value, "num_speculative_tokens")


def _positive(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{key} must be a positive integer, not {value!r}")
    if value > MAX_SPECULATIVE_TOKENS:
        raise ValueError(f"{key} cannot be more than {MAX_SPECULATIVE_TOKENS}, got {value}")
    return value


def _check_lookup(data: Mapping[str, Any]) -> None:
    """The n-gram window, as vLLM checks it: each bound a positive integer, one given alone
    standing for both, the minimum not above the maximum."""
    low, high = data.get("prompt_lookup_min"), data.get("prompt_lookup_max")
    for key, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{key} must be an integer, not {value!r}")
        if value is not None and value < 1:
            raise ValueError(f"{key} must be at least 1, got {value}")
    low = high if low is None else low
    high = low if high is None else high
    if low is not None and high is not None and low > high:
        raise ValueError(f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
