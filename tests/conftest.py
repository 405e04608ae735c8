"""Root conftest: the shared fixtures of tests.support, Hypothesis caches out of the repo."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis.configuration import set_hypothesis_home_dir

# Hypothesis caches (unicode tables, constants) go to the temp dir, not the repository root.
set_hypothesis_home_dir(str(Path(tempfile.gettempdir()) / "vllm-sim-hypothesis"))

pytest_plugins = ("tests.support.fixtures",)
