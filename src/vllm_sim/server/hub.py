"""Downloads a hub model's tokenizer files into the HuggingFace cache, once, at start-up.

Only what tokenization and the context length need is fetched (tokenizer, templates and
configuration files, never weights), with the hub library's progress bars on stderr. The
hub library honours HF_HUB_OFFLINE, HF_HOME, HF_HUB_CACHE and HF_TOKEN; with the hub out
of reach the server starts anyway, with the simulated tokenizer and a warning.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Final

from vllm_sim.config import Config
from vllm_sim.model_files import find_model_folder
from vllm_sim.server.logs import LOG_FORMAT
from vllm_sim.server.tokenizer_setup import tokenizer_name, tokenizer_revision

TOKENIZER_PATTERNS: Final = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "additional_chat_templates/*",
    "config.json",
    "generation_config.json",
)
_OFFLINE_VALUES: Final = ("1", "on", "yes", "true")
_log = logging.getLogger("vllm_sim")

# Fetches one repository's files: name, revision, download folder.
Download = Callable[[str, str, str], None]


def hub_offline(environ: Mapping[str, str]) -> bool:
    return environ.get("HF_HUB_OFFLINE", "").strip().lower() in _OFFLINE_VALUES


def _looks_like_hub_id(name: str) -> bool:
    """`org/name` or `name`, as the hub spells ids; a path never is one."""
    if not name or name.startswith((".", "/", "~")) or name.count("/") > 1 or len(name) > 96:
        return False
    return all(
        part and part.replace("-", "").replace("_", "").replace(".", "").isalnum()
        for part in name.split("/")
    )


def fetch_tokenizer_files(
    cfg: Config, environ: Mapping[str, str] = os.environ, download: Download | None = None
) -> None:
    """Puts the tokenizer's files in the cache when they are not on this machine yet and
    the hub may be asked; says why not when it fails (start-up then falls back).
    `download`: how one repository is fetched (in this process by default)."""
    if cfg.force_dummy_tokenizer:
        return
    for name, revision in _wanted(cfg):
        fetch_model_files(name, revision, cfg.download_dir, environ, download)


def fetch_model_files(
    name: str,
    revision: str = "",
    download_dir: str = "",
    environ: Mapping[str, str] = os.environ,
    download: Download | None = None,
) -> None:
    """Downloads hub model `name`'s tokenizer and configuration files unless they are here
    already, the hub is offline or `name` is no hub id."""
    if hub_offline(environ) or not _looks_like_hub_id(name):
        return
    if find_model_folder(name, revision, environ, download_dir) is None:
        (download or _download)(name, revision, download_dir)


def download_in_child(name: str, revision: str, download_dir: str) -> None:
    """The download in a process of its own, which says what it does on this stderr: the
    hub library and the HTTP stack it brings (about 10 MiB resident) never load into the
    server, which only reads the files afterwards."""
    level = str(_log.getEffectiveLevel())
    argv = [sys.executable, "-m", "vllm_sim.server.hub", level, name, revision, download_dir]
    if subprocess.run(argv, check=False).returncode != 0:
        _log.warning("Cannot download %s from the HuggingFace hub: the download failed", name)


def _wanted(cfg: Config) -> list[tuple[str, str]]:
    """The tokenizer's repository, and the model's when it differs (its config.json)."""
    names = [(tokenizer_name(cfg), tokenizer_revision(cfg))]
    if cfg.tokenizer and cfg.tokenizer != cfg.model:
        names.append((cfg.model, cfg.revision))
    return names


def _download(name: str, revision: str, download_dir: str) -> None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    _log.info("Downloading the tokenizer files of %s from the HuggingFace hub", name)
    try:
        snapshot_download(
            name,
            revision=revision or None,
            allow_patterns=list(TOKENIZER_PATTERNS),
            cache_dir=download_dir or None,
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        _log.warning("Cannot download %s from the HuggingFace hub: %s", name, reason)


def main(argv: list[str]) -> int:
    """`python -m vllm_sim.server.hub LEVEL NAME REVISION DOWNLOAD_DIR`: download_in_child's
    process. A failure is a warning, as in the server: the exit status is always 0."""
    level, name, revision, download_dir = argv
    logging.basicConfig(level=int(level), format=LOG_FORMAT, stream=sys.stderr)
    try:
        _download(name, revision, download_dir)
    except Exception as error:  # whatever the hub library raises: the server goes on
        _log.warning("Cannot download %s from the HuggingFace hub: %r", name, error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
