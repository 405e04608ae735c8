"""Every setting, as parsing (argv, YAML, env), validation, `--help`, `docs/flags.md` and
`/admin/config` walk them: the declarations of `Config`'s fields (see `model`), and the
flags accepted without a field (`--config`, read by the loader, and klog's)."""

from __future__ import annotations

from dataclasses import fields

from .kinds import BOOL, INT, STRING
from .model import MS, SECOND, VLLM_MAX_NUM_BATCHED_TOKENS, Config
from .setting import Admin, EnvRule, EnvVar, Group, Setting, cli_only, declared

# fmt: off
_CONFIG_FLAG = cli_only(
    "config", STRING, "", "YAML file of settings (keys = flag names); flags beat it"
)
_KLOG_FLAGS = (
    cli_only("vmodule", STRING, "", "klog per-file verbosity (pattern=N,...); ignored"),
    cli_only("logtostderr", BOOL, True, "klog; ignored (logs always go to stderr)"),
    cli_only("alsologtostderr", BOOL, False, "klog; ignored"),
    cli_only("stderrthreshold", STRING, "2", "klog; ignored"),
    cli_only("log_dir", STRING, "", "klog; ignored"),
    cli_only("log_file", STRING, "", "klog; ignored"),
    cli_only("log_file_max_size", INT, 1800, "klog (MB); ignored"),
    cli_only("one_output", BOOL, False, "klog; ignored"),
    cli_only("skip_headers", BOOL, False, "klog; ignored"),
    cli_only("skip_log_headers", BOOL, False, "klog; ignored"),
    cli_only("add_dir_header", BOOL, False, "klog; ignored"),
    cli_only("log_backtrace_at", STRING, "", "klog; ignored"),
    cli_only("alsologtostderrthreshold", STRING, "", "klog; ignored"),
    cli_only("legacy_stderr_threshold_behavior", BOOL, True, "klog; ignored"),
)
# fmt: on

SETTINGS: tuple[Setting, ...] = (_CONFIG_FLAG, *declared(fields(Config)), *_KLOG_FLAGS)

FLAGS: dict[str, Setting] = {s.key: s for s in SETTINGS if s.cli}
YAML_KEYS: dict[str, Setting] = {s.key: s for s in SETTINGS if s.yaml}
SHORTHANDS: dict[str, Setting] = {s.shorthand: s for s in SETTINGS if s.shorthand}
ADMIN_KEYS: dict[str, Setting] = {s.key: s for s in SETTINGS if s.admin is not Admin.NO}

__all__ = [
    "ADMIN_KEYS",
    "FLAGS",
    "MS",
    "SECOND",
    "SETTINGS",
    "SHORTHANDS",
    "VLLM_MAX_NUM_BATCHED_TOKENS",
    "YAML_KEYS",
    "Admin",
    "EnvRule",
    "EnvVar",
    "Group",
    "Setting",
]
