"""vLLM's sampling parameters and extra fields of the OpenAI-style bodies, typed as vLLM
types them and range-checked as vLLM checks them.

The simulator generates no differently for any of them (others may make a field act); what
it owes a client is vLLM's answer to a bad value: a wrong type is a 400 naming the field
(the decoder's), a value out of range a 400 with vLLM's own message (`check_sampling`). A
field vLLM declares without `| None` refuses an explicit null, as there. Fields vLLM does not
know are ignored, as its OpenAI models ignore them.

Where vLLM reports a check with its parameter (a `VLLMValidationError` naming it), the
message ends with vLLM's `(parameter=..., value=...)` suffix, as the real server sends it;
`param` always names the field, whether vLLM fills it or not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, NoReturn, Protocol

import msgspec

from vllm_sim.engine.generation.stops import StopRules
from vllm_sim.errors import RequestError
from vllm_sim.frontend.endpoint import OpenAIBody, Options
from vllm_sim.protocols.common.logprobs import MAX_LOGPROBS

# Bounds on what one request may list, so that the work spent on a request (and on acting
# on these fields later) stays small whatever it sends: an over-long list is a 400 naming
# the field. All but the first are the simulator's own, far above what clients send.
MAX_STOP_STRINGS = 4  # vLLM's default VLLM_MAX_STOP_STRINGS (and OpenAI's limit)
MAX_STOP_STRING_CHARS = 4096
MAX_STOP_TOKEN_IDS = 1024
MAX_BAD_WORDS = 128  # vLLM's default VLLM_MAX_NUM_BAD_WORDS
MAX_BAD_WORD_CHARS = 1024
MAX_LOGIT_BIAS = 2048  # entries
MAX_ALLOWED_TOKEN_IDS = 16384
MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's own bound (the sampler's row width)
MAX_CACHE_SALT_CHARS = 1024  # vLLM's field bound

# The simulated tokenizer's ids are any 32-bit value, so that is its vocabulary.
VOCAB_SIZE = 2**32
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
StopStrings = Annotated[
    list[Annotated[str, msgspec.Meta(max_length=MAX_STOP_STRING_CHARS)]],
    msgspec.Meta(max_length=MAX_STOP_STRINGS),
]
StopString = Annotated[str, msgspec.Meta(max_length=MAX_STOP_STRING_CHARS)]
StopTokenIds = Annotated[list[int], msgspec.Meta(max_length=MAX_STOP_TOKEN_IDS)]
BadWords = Annotated[
    list[Annotated[str, msgspec.Meta(max_length=MAX_BAD_WORD_CHARS)]],
    msgspec.Meta(max_length=MAX_BAD_WORDS),
]
LogitBias = Annotated[dict[str, float], msgspec.Meta(max_length=MAX_LOGIT_BIAS)]
AllowedTokenIds = Annotated[list[int], msgspec.Meta(max_length=MAX_ALLOWED_TOKEN_IDS)]
LogprobTokenIds = Annotated[list[int], msgspec.Meta(max_length=MAX_LOGPROB_TOKEN_IDS)]
CacheSalt = Annotated[str, msgspec.Meta(max_length=MAX_CACHE_SALT_CHARS)]
XargValue = str | int | float | list[str | int | float]

TruncationSide = Literal["left", "right"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class StructuredOutputs(msgspec.Struct, kw_only=True):
    """vLLM's `structured_outputs`: exactly one constraint, and options."""

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None


class RepetitionDetection(msgspec.Struct, kw_only=True):
    """vLLM's `repetition_detection`: stop on a repeated N-gram."""

    max_pattern_size: int = 0
    min_pattern_size: int = 0
    min_count: int = 0


class EngineSampling(msgspec.Struct, kw_only=True):
    """The sampling fields of vLLM's engine-level SamplingParams, as /inference/v1/generate
    takes them in `sampling_params` (same names as in the OpenAI bodies)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: Int64 | None = None
    stop: StopString | StopStrings | None = None
    stop_token_ids: StopTokenIds | None = None
    bad_words: BadWords | None = None
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    prompt_logprobs: int | None = None
    logit_bias: LogitBias | None = None
    allowed_token_ids: AllowedTokenIds | None = None
    structured_outputs: StructuredOutputs | None = None
    repetition_detection: RepetitionDetection | None = None
    thinking_token_budget: int | None = None
    stream_interval: Annotated[int, msgspec.Meta(ge=1)] | None = None


class SamplingRequest(OpenAIBody, kw_only=True):
    """vLLM's sampling parameters and extra fields that chat and completions bodies share.
    None means vLLM's (or the server's) default."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: Int64 | None = None
    stop: StopString | StopStrings | None = None
    stop_token_ids: StopTokenIds | None = None
    bad_words: BadWords = msgspec.field(default_factory=list)
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, msgspec.Meta(ge=-1, le=INT64_MAX)] | None = None
    truncation_side: TruncationSide | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: LogprobTokenIds | None = None
    allowed_token_ids: AllowedTokenIds | None = None
    logit_bias: LogitBias | None = None
    use_beam_search: bool = False
    length_penalty: float = 1.0
    watermarking: bool | None = None
    user: str | None = None
    priority: Int64 = 0
    # UNSET: none given (vLLM makes one up); vLLM's field takes no null.
    request_id: str | msgspec.UnsetType = msgspec.UNSET
    session_id: str | None = None
    cache_salt: CacheSalt | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    return_token_offsets: bool | None = False
    return_mm_kwargs: bool = True
    routed_experts_prompt_start: Annotated[int, msgspec.Meta(ge=0)] = 0
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, XargValue] | None = None
    structured_outputs: StructuredOutputs | None = None
    repetition_detection: RepetitionDetection | None = None
    thinking_token_budget: int | None = None
    stream_interval: Annotated[int, msgspec.Meta(ge=1)] | None = None


class ChatSampling(SamplingRequest, kw_only=True):
    """The fields only vLLM's chat body has, beside the shared ones."""

    echo: bool = False  # prepend the last message when it has the answer's role
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = True
    reasoning_effort: ReasoningEffort | None = None
    include_reasoning: bool = True
    return_prompt_text: bool | None = None


class CompletionSampling(SamplingRequest, kw_only=True):
    """The fields only vLLM's completions body has, beside the shared ones."""

    echo: bool | None = False
    suffix: str | None = None  # refused: the simulated model renders no fill-in-the-middle
    # Base64 tensors in vLLM; refused, as vLLM refuses them without --enable-prompt-embeds.
    prompt_embeds: str | list[str] | None = None
    add_special_tokens: bool = True


class SamplingValues(Protocol):
    """What the range checks read: the fields an OpenAI body and generate's
    `sampling_params` have in common."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def min_p(self) -> float | None: ...
    @property
    def presence_penalty(self) -> float | None: ...
    @property
    def frequency_penalty(self) -> float | None: ...
    @property
    def repetition_penalty(self) -> float | None: ...
    @property
    def stop(self) -> str | Sequence[str] | None: ...
    @property
    def bad_words(self) -> Sequence[str] | None: ...
    @property
    def min_tokens(self) -> int: ...
    @property
    def prompt_logprobs(self) -> int | None: ...
    @property
    def logit_bias(self) -> Mapping[str, float] | None: ...
    @property
    def allowed_token_ids(self) -> Sequence[int] | None: ...
    @property
    def structured_outputs(self) -> StructuredOutputs | None: ...
    @property
    def repetition_detection(self) -> RepetitionDetection | None: ...
    @property
    def thinking_token_budget(self) -> int | None: ...


# ------------------------------------------------------------------ the checks


def check_sampling(params: SamplingRequest | EngineSampling, options: Options) -> None:
    """vLLM's checks of the sampling fields, in vLLM's order: the request's own rules,
    the field objects, SamplingParams' range checks, then the engine's limits. A field
    left unset costs one test: this runs on every request."""
    if isinstance(params, SamplingRequest):
        _check_request(params, options)
    if (
        params.structured_outputs is not None
        or params.repetition_detection is not None
        or params.thinking_token_budget is not None
    ):
        _check_field_objects(params, isinstance(params, CompletionSampling))
    if params.logit_bias:
        _check_logit_bias_keys(params.logit_bias)
    _check_ranges(params)
    _check_tokens(params, options.max_tokens)
    n = options.n
    if n is not None and n > 1:
        beam = isinstance(params, SamplingRequest) and params.use_beam_search
        if not beam:  # n is the beam width in beam search
            _check_greedy(params.temperature, n)
    _check_engine_limits(params)


def _reject(message: str, param: str) -> NoReturn:
    raise RequestError(400, message, param=param)


def _reject_named(message: str, param: str, value: object = None) -> NoReturn:
    """A check vLLM raises naming its parameter: its message carries the suffix."""
    extras = f"parameter={param}" if value is None else f"parameter={param}, value={value}"
    raise RequestError(400, f"{message} ({extras})", param=param)


def _check_request(body: SamplingRequest, options: Options) -> None:
    """The rules vLLM's request models apply before any sampling parameter is built."""
    if body.cache_salt is not None and not body.cache_salt:
        _reject_named(
            "Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt"
        )
    if body.prompt_logprobs is not None:
        _check_prompt_logprobs(body.prompt_logprobs, options.stream)
    if body.logprob_token_ids is not None:
        _check_logprob_token_ids(body, options)
    if isinstance(body, ChatSampling):
        if body.continue_final_message and body.add_generation_prompt:
            _reject(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                "continue_final_message",
            )
    elif isinstance(body, CompletionSampling):
        _check_completion_fields(body)


def _check_prompt_logprobs(value: int, stream: bool) -> None:
    if stream and (value > 0 or value == -1):
        _reject_named("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    if value < -1:
        _reject_named("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", value)


def _check_logprob_token_ids(body: SamplingRequest, options: Options) -> None:
    param = "logprob_token_ids"
    if not body.logprob_token_ids:
        _reject_named("`logprob_token_ids` must not be an empty list.", param)
    if body.use_beam_search:
        _reject_named("`logprob_token_ids` is not supported with beam search.", param)
    if isinstance(body, ChatSampling) and options.logprobs is None:
        _reject_named("when using `logprob_token_ids`, `logprobs` must be set to true.", param)
    if isinstance(body, CompletionSampling):
        if body.echo and options.max_tokens == 0:
            _reject_named(
                "`logprob_token_ids` is not supported when `echo=True` and `max_tokens=0` "
                "because no output tokens are generated.",
                param,
            )
        if options.logprobs is None:
            _reject_named("when using `logprob_token_ids`, `logprobs` must be set.", param)


def _check_completion_fields(body: CompletionSampling) -> None:
    if body.suffix is not None:
        # vLLM 0.32's text, sent with `param` but without the parameter suffix.
        _reject("suffix is only supported for models with FIM completion rendering", "suffix")
    if body.prompt_embeds:
        _reject_named(
            "You must set `--enable-prompt-embeds` to input `prompt_embeds`.", "prompt_embeds"
        )


def _check_field_objects(params: SamplingValues, completions: bool) -> None:
    """The checks vLLM's field objects make of themselves as the body is parsed."""
    outputs = params.structured_outputs
    if outputs is not None:
        _check_structured_outputs(outputs, isinstance(params, SamplingRequest), completions)
    detection = params.repetition_detection
    if detection is not None:
        _check_repetition_detection(detection)
    budget = params.thinking_token_budget
    if budget is not None and budget < -1:
        _reject_named(
            "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.",
            "thinking_token_budget",
            budget,
        )


_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def _check_structured_outputs(outputs: StructuredOutputs, request: bool, completions: bool) -> None:
    param = "structured_outputs"
    if request and sum(v is not None for v in (outputs.json, outputs.regex, outputs.choice)) > 1:
        message = (
            "You can only use one kind of constraints for structured outputs "
            "('json', 'regex' or 'choice')."
        )
        if completions:  # vLLM names the parameter on completions only
            _reject_named(message, param)
        _reject(message, param)
    given = sum(getattr(outputs, name) is not None for name in _CONSTRAINTS)
    if given != 1:
        # vLLM shows its whole parameter object; its public fields are these.
        fields = msgspec.structs.asdict(outputs)
        if given > 1:
            _reject(
                "You can only use one kind of structured outputs constraint "
                f"but multiple are specified: {fields}",
                param,
            )
        _reject(
            "You must use one kind of structured outputs constraint "
            f"but none are specified: {fields}",
            param,
        )


def _check_repetition_detection(detection: RepetitionDetection) -> None:
    largest, smallest = detection.max_pattern_size, detection.min_pattern_size
    if largest < 0 or smallest < 0 or smallest > largest:
        _reject(
            "max_pattern_size, min_pattern_size must be >=0, with min_pattern_size <= "
            "max_pattern_size. Set both to 0 to disable repetitive pattern detection.",
            "repetition_detection",
        )
    if largest > 0 and detection.min_count < 2:
        _reject(
            "min_count must be >= 2 to detect repetitive patterns in engine output. If you "
            "do not wish to detect repetitive patterns, set max_pattern_size to 0.",
            "repetition_detection",
        )


def _token_id(key: str) -> int | None:
    """A logit_bias key as vLLM reads it (Python's int()), None if it is no integer."""
    try:
        return int(key)
    except ValueError:
        return None


def _check_logit_bias_keys(bias: Mapping[str, float]) -> None:
    invalid = [key for key in bias if _token_id(key) is None]
    if invalid:
        _reject_named(
            "logit_bias contains key(s) that cannot be converted to integer token IDs: "
            f"{invalid!r}",
            "logit_bias",
            invalid,
        )


def _check_ranges(params: SamplingValues) -> None:
    """SamplingParams' range checks of the sampling knobs; None is vLLM's default."""
    presence, frequency = params.presence_penalty, params.frequency_penalty
    if presence is not None and not -2.0 <= presence <= 2.0:
        _reject(f"presence_penalty must be in [-2, 2], got {presence}.", "presence_penalty")
    if frequency is not None and not -2.0 <= frequency <= 2.0:
        _reject(f"frequency_penalty must be in [-2, 2], got {frequency}.", "frequency_penalty")
    repetition = params.repetition_penalty
    if repetition is not None and not math.isfinite(repetition):
        _reject(
            f"repetition_penalty must be a finite number, got {repetition}.", "repetition_penalty"
        )
    if repetition is not None and repetition <= 0.0:
        _reject(
            f"repetition_penalty must be greater than zero, got {repetition}.", "repetition_penalty"
        )
    if params.temperature is not None:
        _check_temperature(params.temperature)
    top_p = params.top_p
    if top_p is not None and not 0.0 < top_p <= 1.0:
        _reject_named(f"top_p must be in (0, 1], got {top_p}.", "top_p", top_p)
    top_k = params.top_k
    if top_k is not None and top_k < -1:  # -1 is accepted as "off", like 0
        _reject(f"top_k must be 0 (disable), or at least 1, got {top_k}.", "top_k")
    min_p = params.min_p
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        _reject(f"min_p must be in [0, 1], got {min_p}.", "min_p")


def _check_temperature(temperature: float) -> None:
    if not math.isfinite(temperature):
        _reject_named(
            f"temperature must be a finite number, got {temperature}.", "temperature", temperature
        )
    if temperature < 0.0:
        _reject_named(
            f"temperature must be non-negative, got {temperature}.", "temperature", temperature
        )
    if temperature > 2.0:
        _reject_named(
            f"temperature must be in [0, 2], got {temperature}.", "temperature", temperature
        )


def _check_tokens(params: SamplingValues, max_tokens: int | None) -> None:
    """SamplingParams' checks of output lengths and of the token and string lists."""
    min_tokens = params.min_tokens
    if min_tokens < 0:
        _reject(f"min_tokens must be greater than or equal to 0, got {min_tokens}.", "min_tokens")
    # A max_tokens below 1 is the pipeline's own 400, reported after this one in vLLM too.
    if max_tokens is not None and max_tokens >= 1 and min_tokens > max_tokens:
        _reject(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            "min_tokens",
        )
    prompt_logprobs = params.prompt_logprobs
    if prompt_logprobs is not None and prompt_logprobs < -1:
        _reject_named(
            f"prompt_logprobs must be non-negative or -1, got {prompt_logprobs}.",
            "prompt_logprobs",
            prompt_logprobs,
        )
    stop = params.stop
    if stop is not None and any(not text for text in ([stop] if isinstance(stop, str) else stop)):
        _reject("stop cannot contain an empty string.", "stop")
    bad_words = params.bad_words
    if bad_words and not all(bad_words):
        unique = list(dict.fromkeys(bad_words))  # vLLM drops repeats before it checks
        _reject(f"bad_words cannot contain an empty string. Got bad_words={unique}", "bad_words")


def _check_greedy(temperature: float | None, n: int) -> None:
    # vLLM raises a temperature in (0, 0.01) to 0.01, so only 0 itself samples greedily.
    if temperature == 0.0:
        _reject(f"n must be 1 when using greedy sampling, got {n}.", "n")


def _check_engine_limits(params: SamplingValues) -> None:
    """The engine's checks against the server's limits and the vocabulary."""
    prompt_logprobs = params.prompt_logprobs
    if prompt_logprobs:
        count = VOCAB_SIZE if prompt_logprobs == -1 else prompt_logprobs  # -1: all of them
        if count > MAX_LOGPROBS:
            _reject_named(
                f"Requested prompt logprobs of {count}, which is greater than max allowed: "
                f"{MAX_LOGPROBS}",
                "prompt_logprobs",
                count,
            )
    outputs = params.structured_outputs
    if outputs is not None and outputs.choice == []:
        _reject(f"Choice '{outputs.choice}' cannot be an empty list", "structured_outputs")
    _check_vocabulary(params)


def _check_vocabulary(params: SamplingValues) -> None:
    bias = params.logit_bias
    if bias:
        ids = dict.fromkeys(int(key) for key in bias)  # keys were checked to be integers
        invalid = [i for i in ids if not 0 <= i < VOCAB_SIZE]
        if invalid:
            _reject_named(
                f"token_id(s) {invalid} in logit_bias contain out-of-vocab token ids. "
                f"Vocabulary size: {VOCAB_SIZE}",
                "logit_bias",
                invalid,
            )
    allowed = params.allowed_token_ids
    if allowed is not None:
        if not allowed:
            _reject("allowed_token_ids is not None and empty!", "allowed_token_ids")
        if not all(0 <= i < VOCAB_SIZE for i in allowed):
            _reject("allowed_token_ids contains out-of-vocab token id!", "allowed_token_ids")


def sampling_options(options: Options, body: SamplingRequest) -> Options:
    """`options` after vLLM's checks of the sampling fields, with what they change. A body
    that sets none of them (the common case) is told apart by one comparison of their
    values with the defaults, which pass every check and change nothing."""
    fields = _DEFAULTS.get(type(body).__mro__[1])
    if fields is not None:
        start, end, defaults = fields
        if msgspec.structs.astuple(body)[start:end] == defaults:
            return options
    check_sampling(body, options)
    return sampled(options, body)


def _defaults(cls: type[SamplingRequest]) -> tuple[int, int, tuple[object, ...]]:
    """Where the sampling fields of a `cls` body lie among its fields (a body's own fields
    follow them), and their default values."""
    start, end = len(OpenAIBody.__struct_fields__), len(cls.__struct_fields__)
    return start, end, msgspec.structs.astuple(cls())[start:end]


def sampled(options: Options, body: SamplingRequest) -> Options:
    """`options` with the sampling parameters that change what is generated (see
    engine_sampled), and what the answer lists."""
    engine_sampled(options, body)
    options.token_ids = bool(body.return_token_ids)
    if isinstance(body, CompletionSampling):
        options.echo = bool(body.echo)
    return options


def engine_sampled(options: Options, params: SamplingRequest | EngineSampling) -> None:
    """Sets on `options` what the engine-level sampling fields change in the generated
    text: stop strings and tokens, min_tokens, the seed, greedy decoding, and the prompt's
    logprobs."""
    stop = params.stop
    strings = (stop,) if isinstance(stop, str) else tuple(stop or ())
    ids = frozenset(params.stop_token_ids or ())
    if strings or ids or params.min_tokens:
        options.stops = StopRules(
            strings, ids, params.include_stop_str_in_output, params.min_tokens
        )
    options.seed = params.seed
    options.greedy = params.temperature == 0
    options.prompt_logprobs = params.prompt_logprobs
    options.reasoning_budget = params.thinking_token_budget


_DEFAULTS: dict[type, tuple[int, int, tuple[object, ...]]] = {
    cls: _defaults(cls) for cls in (ChatSampling, CompletionSampling)
}
