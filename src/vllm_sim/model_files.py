"""Where a model's files are on this machine: a local folder, or the HuggingFace cache.

vLLM takes `--model` (and `--tokenizer`) as either a folder or a hub id; a hub id's files
are downloaded once into the HuggingFace cache and read from there. This module only
looks; downloading is the server's job, done once before any rank starts.

The cache layout is the hub library's: `<cache>/models--<org>--<name>/refs/<revision>`
holds the commit a branch or tag points to, and `snapshots/<commit>/` the files.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

# A folder is a model folder when it holds one of these.
MODEL_FILES: Final = ("tokenizer.json", "tokenizer_config.json", "config.json")
_COMMIT: Final = re.compile(r"[0-9a-f]{40}")
_MAX_NAME: Final = 512  # longer is no path and no hub id; never stat it
# A model's JSON files are a few KB (configs) to a few MB (tokenizer.json); never read more.
MAX_JSON_BYTES: Final = 64 << 20


def hub_cache(environ: Mapping[str, str], download_dir: str = "") -> Path:
    """The hub cache folder, by the hub library's precedence of settings."""
    if download_dir:
        return Path(download_dir).expanduser()
    if cache := environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    home = environ.get("HF_HOME") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    return Path(home).expanduser() / "hub"


def _is_model_folder(path: Path) -> bool:
    try:
        return path.is_dir() and any((path / name).is_file() for name in MODEL_FILES)
    except OSError:  # a folder we may not read
        return False


def local_folder(name: str) -> Path | None:
    """`name` as a folder holding a model's files, if it is one."""
    if not name or len(name) > _MAX_NAME:
        return None
    path = Path(name).expanduser()
    return path if _is_model_folder(path) else None


def cached_snapshot(repo_id: str, revision: str, cache: Path) -> Path | None:
    """The cached snapshot of hub model `repo_id` at `revision` (a branch, tag or
    commit; "" is `main`), if it holds a model's files."""
    if not repo_id or len(repo_id) > _MAX_NAME or repo_id.count("/") > 1:
        return None
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    revision = revision or "main"
    commit = revision if _COMMIT.fullmatch(revision) else None
    if commit is None:
        try:
            commit = (repo / "refs" / revision).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
    snapshot = repo / "snapshots" / commit
    return snapshot if _is_model_folder(snapshot) else None


def find_model_folder(
    name: str, revision: str, environ: Mapping[str, str], download_dir: str = ""
) -> Path | None:
    """The folder holding `name`'s files on this machine, without any download."""
    return local_folder(name) or cached_snapshot(name, revision, hub_cache(environ, download_dir))


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON in a model file, or None when the file is absent; raises ValueError when it
    is unreadable, larger than `max_bytes` or not JSON."""
    try:
        if not path.is_file():
            return None
        if path.stat().st_size > max_bytes:
            raise ValueError(f"{path} is larger than {max_bytes >> 20} MB")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RecursionError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} cannot be read: {error}") from None
