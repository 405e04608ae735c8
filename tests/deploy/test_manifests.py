"""Every shipped manifest and overlay: valid Kubernetes, wired to a simulator that starts.

Rendered with `kubectl kustomize` and checked against the Kubernetes OpenAPI schemas that
`kubernetes-validate` ships (strict: an unknown field fails), offline.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.kube import (
    CONFIG_MOUNT,
    KUBERNETES,
    Manifest,
    kustomizations,
    mounted_config,
    name_of,
    of_kind,
    render,
    simulator_containers,
)
from vllm_sim.config.load import load_config

# The oldest release with native sidecar containers on by default (the P/D overlay's
# routing sidecar), and the newest whose schemas the validator ships.
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
# Custom resources have no schema in the validator; their shape is checked here instead.
CUSTOM_KINDS = {"ServiceMonitor"}
# What the startup probe must allow beyond --startup-duration: the interpreter's start.
STARTUP_MARGIN_S = 20.0

BUILDS = kustomizations()
BUILD_IDS = [name_of(path) for path in BUILDS]
POD_ENV = {"POD_IP": "10.0.0.7", "POD_NAME": "vllm-sim-0", "POD_NAMESPACE": "default"}


def test_every_overlay_is_found() -> None:
    names = set(BUILD_IDS)
    assert {"base", "overlays/fleet", "overlays/pd", "overlays/data-parallel"} <= names
    assert "overlays/kv-events" in names
    assert sum(name.startswith("overlays/profiles/") for name in names) == 6


@pytest.mark.parametrize("path", BUILDS, ids=BUILD_IDS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_objects_match_the_kubernetes_schemas(path: Path, version: str) -> None:
    for obj in render(path):
        if obj["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = f"{obj['kind']}/{obj['metadata']['name']}"
            pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")


@pytest.mark.parametrize("path", BUILDS, ids=BUILD_IDS)
def test_the_simulator_loads_each_deployments_config(path: Path, tmp_path: Path) -> None:
    objects = render(path)
    deployments = [d for d in of_kind(objects, "Deployment") if simulator_containers(d)]
    assert deployments
    for deployment in deployments:
        container = simulator_containers(deployment)[0]
        config_file = tmp_path / "config.yaml"
        config_file.write_text(mounted_config(objects, deployment))
        args = [_local(arg, tmp_path) for arg in container["args"]]
        config = load_config(args, POD_ENV)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert config.port in ports.values(), (config.port, ports)
        for rank in range(config.data_parallel_size):
            assert config.port + rank in ports.values(), f"rank {rank} has no container port"
        _check_probes(container, config.startup_duration / 1e9)  # a Go duration, in ns


def _local(arg: str, folder: Path) -> str:
    """A container path under the config mount, as the same file in `folder`."""
    prefix = CONFIG_MOUNT + "/"
    return str(folder / arg.removeprefix(prefix)) if arg.startswith(prefix) else arg


def _check_probes(container: Manifest, startup_duration_s: float) -> None:
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/health/ready"
    allowed = startup["periodSeconds"] * startup["failureThreshold"]
    assert allowed >= math.ceil(startup_duration_s + STARTUP_MARGIN_S), (allowed, startup)
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    names = {p["name"] for p in container["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] in names


@pytest.mark.parametrize("path", BUILDS, ids=BUILD_IDS)
def test_services_reach_a_named_pod_port(path: Path) -> None:
    objects = render(path)
    for service in of_kind(objects, "Service"):
        selector = service["spec"]["selector"]
        pods = [
            d["spec"]["template"]
            for d in of_kind(objects, "Deployment")
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(pods) == 1, f"Service {service['metadata']['name']} selects {len(pods)}"
        spec = pods[0]["spec"]
        containers = spec["containers"] + spec.get("initContainers", [])
        port_names = {p["name"] for c in containers for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, (service["metadata"]["name"], port)


@pytest.mark.parametrize("path", BUILDS, ids=BUILD_IDS)
def test_pods_run_as_non_root_with_the_downward_api(path: Path) -> None:
    for deployment in of_kind(render(path), "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in simulator_containers(deployment):
            env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
            assert env == {
                "POD_IP": "status.podIP",
                "POD_NAME": "metadata.name",
                "POD_NAMESPACE": "metadata.namespace",
            }
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}


def test_the_service_monitor_scrapes_the_services_metrics_port() -> None:
    objects = render(next(p for p in BUILDS if name_of(p) == "overlays/fleet"))
    (monitor,) = of_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (service,) = of_kind(objects, "Service")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}


def test_pd_pools_carry_the_roles_llm_d_schedules_by() -> None:
    objects = render(next(p for p in BUILDS if name_of(p) == "overlays/pd"))
    roles: dict[str, Any] = {}
    for deployment in of_kind(objects, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        roles[labels["llm-d.ai/role"]] = deployment
    assert set(roles) == {"prefill", "decode"}
    decode = roles["decode"]["spec"]["template"]["spec"]
    (sidecar,) = decode["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    vllm_port = next(a for a in sidecar["args"] if a.startswith("--vllm-port="))
    config = yaml.safe_load(mounted_config(objects, roles["decode"]))
    assert vllm_port == f"--vllm-port={config['port']}"


def test_kv_events_go_to_the_listener_service() -> None:
    objects = render(next(p for p in BUILDS if name_of(p) == "overlays/kv-events"))
    simulator = next(d for d in of_kind(objects, "Deployment") if simulator_containers(d))
    config = yaml.safe_load(mounted_config(objects, simulator))
    assert config["enable-kvcache"] is True
    listener = next(s for s in of_kind(objects, "Service") if "listener" in s["metadata"]["name"])
    port = listener["spec"]["ports"][0]["port"]
    assert config["zmq-endpoint"] == f"tcp://{listener['metadata']['name']}:{port}"


def test_the_inference_pool_example_selects_the_fleet() -> None:
    pool = yaml.safe_load((KUBERNETES / "examples" / "inferencepool.yaml").read_text())
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    objects = render(next(p for p in BUILDS if name_of(p) == "overlays/fleet"))
    (deployment,) = of_kind(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (container,) = simulator_containers(deployment)
    ports = {p["containerPort"] for p in container["ports"]}
    assert {p["number"] for p in pool["spec"]["targetPorts"]} <= ports
