"""Hypothesis keeps its caches in the temp dir, never in the repository."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis.configuration import set_hypothesis_home_dir

set_hypothesis_home_dir(str(Path(tempfile.gettempdir()) / "vllm-sim-hypothesis"))
