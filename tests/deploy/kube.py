"""The shipped Kubernetes manifests, rendered with `kubectl kustomize`, for the deploy tests."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
# Where the base mounts the simulator's YAML config (deployment.yaml).
CONFIG_MOUNT = "/config"

Manifest = dict[str, Any]


def kustomizations() -> list[Path]:
    """Every directory kustomize can build: the base, each overlay and its parts."""
    found = sorted(path.parent for path in KUBERNETES.rglob("kustomization.yaml"))
    return [path for path in found if _kind(path / "kustomization.yaml") == "Kustomization"]


def _kind(path: Path) -> str:
    kind: str = yaml.safe_load(path.read_text())["kind"]
    return kind


def name_of(path: Path) -> str:
    return str(path.relative_to(KUBERNETES))


@functools.cache
def render(path: Path) -> tuple[Manifest, ...]:
    """The objects `kubectl kustomize` builds from `path` (skips where kubectl is absent)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def of_kind(objects: tuple[Manifest, ...], kind: str) -> Iterator[Manifest]:
    return (obj for obj in objects if obj["kind"] == kind)


def simulator_containers(deployment: Manifest) -> list[Manifest]:
    """The containers running the simulator: its image and its own entrypoint."""
    containers: list[Manifest] = deployment["spec"]["template"]["spec"]["containers"]
    return [c for c in containers if c["image"].startswith("vllm-sim") and "command" not in c]


def mounted_config(objects: tuple[Manifest, ...], deployment: Manifest) -> str:
    """The config.yaml of the ConfigMap that `deployment` mounts at CONFIG_MOUNT."""
    pod = deployment["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for c in pod["containers"] for m in c["volumeMounts"]}
    for volume in pod["volumes"]:
        if mounts.get(volume["name"]) == CONFIG_MOUNT and "configMap" in volume:
            name = volume["configMap"]["name"]
            config_map = next(c for c in of_kind(objects, "ConfigMap") if _named(c, name))
            text: str = config_map["data"]["config.yaml"]
            return text
    raise AssertionError(f"{deployment['metadata']['name']} mounts no config at {CONFIG_MOUNT}")


def _named(obj: Manifest, name: str) -> bool:
    return bool(obj["metadata"]["name"] == name)
