"""Configuration: flags, YAML file and environment -> one immutable, validated `Config`.

Flags, YAML keys, env vars, defaults and error texts are those of llm-d-inference-sim, so its
command lines and files work unchanged. Each setting is declared once, as a field of
`Config` (see `model`); parsing, validation, `--help`, `docs/flags.md`, `/admin/config` and
the settings views of other layers all come from those declarations.

Where this package deliberately differs from the reference (its bugs, fixed):

- **Non-zero exit on bad configuration.** Errors raise `ConfigError` and the command exits
  non-zero with a one-line reason; the reference logs the error and exits 0.
- **`--flag false` works.** A bool flag followed by a bool literal (`true`, `false`, `1`, `0`,
  `t`, `f`, ...) consumes it: `--enable-kvcache false` is false, `--enable-kvcache true` is
  true, a bare `--enable-kvcache` is true. The reference sets true and leaves `false` behind
  as an ignored argument.
- **`--toggle=false` sets false** for `enable-sleep-mode`, `mm-encoder-only`, `omni`,
  `enforce-eager` and `enable-prefix-caching`; the reference ignores the value and sets true.
- **Every bool flag has a `--no-<name>` form** (`--no-enable-kvcache`); the reference has
  it only for those five toggles.
- **YAML `global-cache-hit-threshold` takes effect**; the reference overwrites it with 0.
- **`--config FILE` takes exactly one value**, so `--config f.yaml -v=5` still loads the
  file; the reference skips the file when more non-`--` items follow.
- **A bare `--fake-metrics`** is a `flag needs an argument` error; the reference panics.
- **YAML integer durations are milliseconds** (`time-to-first-token: 500` = 500ms), the
  documented deprecated form that the reference's own Helm chart uses but its code rejects.
  On the command line a bare integer other than `0` is still an error
  (`time: missing unit in duration "100"`).
- **YAML `fake-metrics` may set `total-prompt-tokens` / `total-generation-tokens`**; the
  reference silently ignores them in YAML.
- **Negative fake `total-*` values are rejected**; the reference's counter panics on them.
- **Float settings reject NaN and infinities**, which passed every range check before, also
  as JSON in `/admin/config` (`1e400` decodes to infinity).
- **Every number has an upper bound**: durations at most 1h, `time-factor-under-load` at most
  100, ports 1-65535 (data-parallel ports too), counts with generous ceilings, so no setting
  can overflow the latency arithmetic or wedge the engine.
- **ZMQ endpoints are checked**: a malformed `zmq-endpoint` or `kv-events-replay-endpoint` is
  a configuration error instead of silently disabling KV events.
- **Unknown YAML keys warn** (one line on stderr) and are ignored, as in the reference.
- **`--config` is read with a 1 MiB cap**, from a regular file or a pipe only.
- **Fake-metrics updates through `/admin/config`**: a null field, and a null `fake-metrics`,
  leave everything unchanged (the reference forgets the field or leaves fake mode), and a
  `request-success-total` update replaces the stored map instead of merging into it, so the
  stored config always matches what `/metrics` shows.
- **GET `/admin/config` shows the exact seed**; the reference rounds it through a float64.

vLLM compatibility extras (the reference rejects these lines, or ignores the parts):

- **A positional model** (`vllm-sim MODEL`, `vllm-sim serve MODEL`) is used when `--model`
  is absent (the reference ignores positional arguments).
- **Every `vllm serve` flag of vLLM 0.32 is accepted**, in vLLM's syntax, beside the
  reference's (see the list at the top); `--lora-modules` also takes vLLM's `name=path`, and
  `--max-model-len` vLLM's `32k`, `32K` and `auto`/-1.
- **Defaults follow vLLM where the reference's are toy values:** `max-num-seqs` 256 (5),
  `max-model-len` from a local model folder's config.json, else 32768 (1024),
  `enable-prefix-caching` true (false), `tensor-parallel-size` 1 (0), `kv-cache-size`
  32768 blocks (1024). Values given in flags or YAML are read as before.
"""

from .admin import apply_admin_update, config_to_dict
from .durations import Duration, format_duration, parse_duration
from .errors import ConfigError, HelpRequested
from .fake_metrics import FakeGauge, FakeGenerator, FakeLora, FakeMetrics
from .load import LoadedConfig, load_config, load_startup
from .model import Config
from .values import LoraModule

__all__ = [
    "Config",
    "ConfigError",
    "Duration",
    "FakeGauge",
    "FakeGenerator",
    "FakeLora",
    "FakeMetrics",
    "HelpRequested",
    "LoadedConfig",
    "LoraModule",
    "apply_admin_update",
    "config_to_dict",
    "format_duration",
    "load_config",
    "load_startup",
    "parse_duration",
]
