"""The Helm chart, kept in step with the Kustomize base without a `helm` binary.

No `helm` can be installed on the machines this suite runs on, so the chart is not rendered.
Instead each template is reduced to its YAML skeleton (lines that are only template actions
dropped, inline actions replaced by a marker) and every field of the rendered Kustomize base
must appear in the chart's object of the same kind: the same literal value, or a templated
one. The chart's default config must be the base's, which the image tests start.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.kube import KUBERNETES, Manifest, mounted_config, of_kind, render
from vllm_sim.config.load import load_config

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "vllm-sim"
TEMPLATED = "TEMPLATED"
_ACTION_LINE = re.compile(r"^\s*\{\{.*\}\}\s*$")
_ACTION = re.compile(r"\{\{.*?\}\}")

Path_ = tuple[str, ...]


def skeleton(template: Path) -> Manifest:
    """The template as YAML: action-only lines dropped, inline actions marked TEMPLATED."""
    lines = []
    for line in template.read_text().splitlines():
        if _ACTION_LINE.match(line):
            continue
        lines.append(_ACTION.sub(TEMPLATED, line))
    document: Manifest = yaml.safe_load("\n".join(lines))
    return document


def chart_objects() -> dict[str, Manifest]:
    templates = sorted((CHART / "templates").glob("*.yaml"))
    objects = [skeleton(path) for path in templates]
    return {obj["kind"]: obj for obj in objects}


def base_objects() -> dict[str, Manifest]:
    """The base and the ServiceMonitor component (the chart's serviceMonitor.enabled)."""
    objects = render(KUBERNETES / "overlays" / "fleet")
    return {obj["kind"]: obj for obj in objects}


def leaves(node: Any, path: Path_ = ()) -> list[tuple[Path_, Any]]:
    """(path, value) of every leaf; list items are keyed by their `name` where they have one."""
    if isinstance(node, dict):
        found = []
        for key, value in node.items():
            found += leaves(value, (*path, str(key)))
        return found
    if isinstance(node, list):
        found = []
        for index, item in enumerate(node):
            key = f"[{item['name']}]" if isinstance(item, dict) and "name" in item else f"[{index}]"
            found += leaves(item, (*path, key))
        return found
    return [(path, node)]


def lookup(node: Any, path: Path_) -> tuple[bool, Any]:
    """(found, value) of `path` in `node`; a templated node on the way covers what is below."""
    for key in path:
        if _templated(node):
            return True, TEMPLATED
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list):
            matches = [item for item, item_key in _keyed(node) if item_key == key]
            if not matches:
                return False, None
            node = matches[0]
        else:
            return False, None
    return True, TEMPLATED if _templated(node) else node


def _templated(node: Any) -> bool:
    """Filled in by a template action: an inline one, or a whole inserted block (which the
    skeleton leaves empty)."""
    return node is None or node == "" or (isinstance(node, str) and TEMPLATED in node)


def _keyed(items: list[Any]) -> list[tuple[Any, str]]:
    return [
        (item, f"[{item['name']}]" if isinstance(item, dict) and "name" in item else f"[{i}]")
        for i, item in enumerate(items)
    ]


def test_the_chart_has_the_base_objects() -> None:
    # The fleet overlay adds only its replica count, a label and the ServiceMonitor.
    assert set(chart_objects()) == set(base_objects())


@pytest.mark.parametrize("kind", ["ConfigMap", "Deployment", "Service", "ServiceMonitor"])
def test_every_base_field_is_in_the_chart(kind: str) -> None:
    chart = chart_objects()[kind]
    missing, different = [], []
    for path, value in leaves(base_objects()[kind]):
        if path[:2] == ("metadata", "labels") or "inferenceServing" in "/".join(path):
            continue  # labels are the chart's own (helm.sh/chart, instance), by design
        found, chart_value = lookup(chart, path)
        if not found:
            missing.append("/".join(path))
        elif chart_value != TEMPLATED and chart_value != value:
            different.append(f"{'/'.join(path)}: base {value!r}, chart {chart_value!r}")
    assert not missing, f"{kind}: the chart lacks {missing}"
    assert not different, f"{kind}: {different}"


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def test_the_default_config_is_the_bases_and_loads(tmp_path: Path) -> None:
    objects = render(KUBERNETES / "base")
    (deployment,) = of_kind(objects, "Deployment")
    assert values()["config"] == yaml.safe_load(mounted_config(objects, deployment))
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(values()["config"]))
    config = load_config(["--config", str(config_file)], {"POD_IP": "10.0.0.1"})
    assert config.port == values()["config"]["port"]


def test_the_defaults_fill_the_base_settings() -> None:
    """Values the templates insert whole (resources, security) equal the base's literals."""
    base = base_objects()["Deployment"]["spec"]["template"]["spec"]
    container = base["containers"][0]
    assert values()["resources"] == container["resources"]
    assert values()["securityContext"] == container["securityContext"]
    assert values()["podSecurityContext"] == base["securityContext"]
    assert values()["terminationGracePeriodSeconds"] == base["terminationGracePeriodSeconds"]
    startup = container["startupProbe"]
    assert values()["startupProbe"] == {
        "periodSeconds": startup["periodSeconds"],
        "failureThreshold": startup["failureThreshold"],
    }
    assert values()["service"]["port"] == base_objects()["Service"]["spec"]["ports"][0]["port"]


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == CHART.name
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
