"""Root conftest: the shared fixtures of tests.support, Hypothesis caches out of the repo."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis.configuration import set_hypothesis_home_dir

# Hypothesis caches (unicode tables, constants) go to the temp dir, not the repository root.
set_hypothesis_home_dir(str(Path(tempfile.gettempdir()) / "vllm-sim-hypothesis"))

# Tests never reach the HuggingFace hub, nor read the developer's own cache: every model
# folder a test uses is built by the test (tests.support.hf_models).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HOME"] = str(Path(tempfile.gettempdir()) / "vllm-sim-tests-hf-home")
os.environ.pop("HF_HUB_CACHE", None)

pytest_plugins = ("tests.support.fixtures",)
