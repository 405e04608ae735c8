"""A fleet's instances from one command: instance i serves on port + i with the pod name
`POD_NAME-i` and KV-event endpoints offset by i; a --fleet-config YAML file gives instances
settings of their own, in order, and a bad one is a one-line ConfigError naming what is
wrong; the fleet's flags have their rules; the instances split over processes in
contiguous, balanced groups."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from vllm_sim.config import Config, ConfigError, load_config
from vllm_sim.server.fleet import groups, instance_configs

BASE = ["--model", "m", "--port", "8000"]


def fleet(argv: list[str], environ: Mapping[str, str] | None = None) -> tuple[Config, list[Config]]:
    """The command's configuration and each instance's."""
    env = environ or {}
    cfg = load_config(argv, env)
    return cfg, instance_configs(cfg, argv, env)


def fleet_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def fleet_error(argv: list[str]) -> str:
    """The one-line ConfigError that loading the fleet raises."""
    with pytest.raises(ConfigError) as info:
        fleet(argv)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def config_error(argv: list[str]) -> str:
    """The one-line ConfigError the command line alone raises."""
    with pytest.raises(ConfigError) as info:
        load_config(argv, {})
    message = str(info.value)
    assert "\n" not in message, message
    return message


# --- ports, pod names, endpoints -------------------------------------------------------------


def test_instance_i_serves_on_port_plus_i() -> None:
    """Four instances serve on port 8000..8003, one each, in order."""
    _, configs = fleet([*BASE, "--num-instances", "4"])
    assert [c.port for c in configs] == [8000, 8001, 8002, 8003]


def test_each_instance_is_a_fleet_of_one() -> None:
    """An instance's own configuration has num_instances 1, one process and no fleet file,
    so it never starts a fleet of its own."""
    _, configs = fleet([*BASE, "--num-instances", "3"])
    assert [(c.num_instances, c.fleet_processes, c.fleet_config) for c in configs] == [
        (1, 1, "")
    ] * 3


def test_pod_names_are_suffixed_with_the_index() -> None:
    """With POD_NAME=pod in the environment, instance i is called pod-i."""
    _, configs = fleet([*BASE, "--num-instances", "3"], {"POD_NAME": "pod"})
    assert [c.pod_name for c in configs] == ["pod-0", "pod-1", "pod-2"]


def test_no_pod_name_without_one_in_the_environment() -> None:
    """Without POD_NAME, no instance has a pod name (not "-0", "-1", ...)."""
    _, configs = fleet([*BASE, "--num-instances", "3"])
    assert [c.pod_name for c in configs] == ["", "", ""]


def test_kv_event_endpoints_are_offset_by_the_index() -> None:
    """The ZMQ endpoint KV events go to and the replay endpoint each get port + i."""
    argv = [
        *BASE,
        "--num-instances",
        "3",
        "--zmq-endpoint",
        "tcp://127.0.0.1:7000",
        "--kv-events-replay-endpoint",
        "tcp://*:7100",
    ]
    _, configs = fleet(argv)
    assert [c.zmq_endpoint for c in configs] == [
        "tcp://127.0.0.1:7000",
        "tcp://127.0.0.1:7001",
        "tcp://127.0.0.1:7002",
    ]
    assert [c.kv_events_replay_endpoint for c in configs] == [
        "tcp://*:7100",
        "tcp://*:7101",
        "tcp://*:7102",
    ]


def test_no_replay_endpoint_stays_none() -> None:
    """Without --kv-events-replay-endpoint no instance gets one; the default ZMQ endpoint's
    port is still offset."""
    cfg, configs = fleet([*BASE, "--num-instances", "2"])
    assert [c.kv_events_replay_endpoint for c in configs] == ["", ""]
    port = int(cfg.zmq_endpoint.rsplit(":", 1)[1])
    assert [int(c.zmq_endpoint.rsplit(":", 1)[1]) for c in configs] == [port, port + 1]


def test_without_a_fleet_file_every_instance_has_the_commands_settings() -> None:
    """Apart from what the fleet sets per instance, each instance is the command's config."""
    cfg, configs = fleet([*BASE, "--num-instances", "3", "--max-num-seqs", "5"])
    for config in configs:
        assert config.max_num_seqs == 5
        assert config.model == cfg.model and config.max_model_len == cfg.max_model_len


# --- --fleet-config -----------------------------------------------------------------------


def test_a_fleet_file_gives_instances_settings_in_order(tmp_path: Path) -> None:
    """`count: 2` repeats the first entry for instances 0 and 1, the second entry (with
    either spelling of a key) is instance 2's, and instance 3, past the list, runs the
    command's settings."""
    path = fleet_file(
        tmp_path, "instances: [{count: 2, max-num-seqs: 7}, {gpu: H200, max_num_seqs: 9}]\n"
    )
    _, configs = fleet(
        [*BASE, "--num-instances", "4", "--max-num-seqs", "3", "--fleet-config", path]
    )
    assert [c.max_num_seqs for c in configs] == [7, 7, 9, 3]
    assert [c.gpu for c in configs] == ["H100", "H100", "H200", "H100"]
    assert [c.port for c in configs] == [8000, 8001, 8002, 8003]
    assert all(c.num_instances == 1 and c.fleet_config == "" for c in configs)


def test_an_entry_keeps_the_commands_other_settings(tmp_path: Path) -> None:
    """An entry's keys come after the command's flags: what it does not set is the
    command's, what it sets wins."""
    path = fleet_file(tmp_path, "instances: [{max-model-len: 512}]\n")
    argv = [*BASE, "--num-instances", "2", "--max-model-len", "2048", "--max-num-seqs", "6"]
    _, configs = fleet([*argv, "--fleet-config", path])
    assert [c.max_model_len for c in configs] == [512, 2048]
    assert [c.max_num_seqs for c in configs] == [6, 6]


def test_pod_names_and_ports_apply_to_instances_with_entries(tmp_path: Path) -> None:
    """An instance with settings of its own still gets its index's port and pod name."""
    path = fleet_file(tmp_path, "instances: [{max-num-seqs: 2}, {max-num-seqs: 4}]\n")
    argv = [*BASE, "--num-instances", "2", "--fleet-config", path]
    cfg = load_config(argv, {"POD_NAME": "pod"})
    configs = instance_configs(cfg, argv, {"POD_NAME": "pod"})
    assert [(c.port, c.pod_name, c.max_num_seqs) for c in configs] == [
        (8000, "pod-0", 2),
        (8001, "pod-1", 4),
    ]


def test_an_entrys_kv_event_endpoint_is_honoured_or_refused(tmp_path: Path) -> None:
    """A fleet-config entry setting zmq-endpoint either gives that instance the endpoint
    or is refused as a setting of the fleet, as `port` is; it is not silently dropped."""
    path = fleet_file(tmp_path, "instances: [{zmq-endpoint: 'tcp://10.0.0.1:7000'}]\n")
    try:
        _, configs = fleet([*BASE, "--num-instances", "2", "--fleet-config", path])
    except ConfigError:
        return
    assert configs[0].zmq_endpoint == "tcp://10.0.0.1:7000"


def test_more_entries_than_instances_are_refused(tmp_path: Path) -> None:
    """A file describing 3 instances (count included) for --num-instances 2 is refused."""
    path = fleet_file(tmp_path, "instances: [{count: 2}, {max-num-seqs: 4}]\n")
    message = fleet_error([*BASE, "--num-instances", "2", "--fleet-config", path])
    assert "3 instances" in message and "--num-instances 2" in message


def test_an_unknown_key_is_refused_naming_the_instance(tmp_path: Path) -> None:
    """An entry's unknown key is refused as the command line refuses an unknown flag,
    naming the instance."""
    path = fleet_file(tmp_path, "instances: [{}, {no-such-setting: 1}]\n")
    message = fleet_error([*BASE, "--num-instances", "2", "--fleet-config", path])
    assert message.startswith("fleet-config instance 1:")
    assert "no-such-setting" in message


def test_a_bad_value_is_refused_naming_the_instance(tmp_path: Path) -> None:
    """A value the flag's rules refuse names the instance (counted after `count`)."""
    path = fleet_file(tmp_path, "instances: [{count: 2}, {max-num-seqs: abc}]\n")
    message = fleet_error([*BASE, "--num-instances", "3", "--fleet-config", path])
    assert message.startswith("fleet-config instance 2:")
    assert "max-num-seqs" in message


def test_a_value_out_of_range_is_refused_naming_the_instance(tmp_path: Path) -> None:
    """A value of the right type that a rule refuses is reported with its instance."""
    path = fleet_file(tmp_path, "instances: [{gpu: NoSuchGpu}]\n")
    message = fleet_error([*BASE, "--num-instances", "2", "--fleet-config", path])
    assert message.startswith("fleet-config instance 0:")
    assert "NoSuchGpu" in message


@pytest.mark.parametrize("key", ["port", "num-instances", "fleet_processes", "fleet-config"])
def test_settings_of_the_fleet_are_refused_in_an_entry(tmp_path: Path, key: str) -> None:
    """An entry may not set what the fleet sets per instance (port, and the fleet flags)."""
    path = fleet_file(tmp_path, f"instances: [{{{key}: 9000}}]\n")
    message = fleet_error([*BASE, "--num-instances", "2", "--fleet-config", path])
    assert message == f"fleet-config instance 0: {key.replace('_', '-')} is set by the fleet"


@pytest.mark.parametrize("count", ["0", "-1", "two", "true", "1.5"])
def test_a_bad_count_is_refused(tmp_path: Path, count: str) -> None:
    """`count` must be a positive integer (not a bool, a float or a string)."""
    path = fleet_file(tmp_path, f"instances: [{{count: {count}}}]\n")
    message = fleet_error([*BASE, "--num-instances", "2", "--fleet-config", path])
    assert "instances[0].count must be a positive integer" in message


def test_an_entry_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    """An entry that is not a mapping is refused naming the file and the entry's position."""
    path = fleet_file(tmp_path, "instances: [{}, max-num-seqs]\n")
    message = fleet_error([*BASE, "--num-instances", "2", "--fleet-config", path])
    assert message.endswith("instances[1] is not a mapping")
    assert path in message


def test_invalid_yaml_is_refused_with_its_line(tmp_path: Path) -> None:
    """A file that is not YAML is refused naming the file and the line."""
    path = fleet_file(tmp_path, "instances:\n  - {max-num-seqs: 2\n  - [\n")
    message = fleet_error([*BASE, "--num-instances", "2", "--fleet-config", path])
    assert message.startswith(f"fleet-config {path}: not valid YAML (line ")


@pytest.mark.parametrize(
    "text", ["", "other: 1\n", "instances: 3\n", "instances: {count: 2}\n", "- {}\n"]
)
def test_a_file_without_an_instances_list_is_refused(tmp_path: Path, text: str) -> None:
    """An empty file, one without `instances`, or one whose `instances` is not a list is refused."""
    path = fleet_file(tmp_path, text)
    message = fleet_error([*BASE, "--num-instances", "2", "--fleet-config", path])
    assert message == f"fleet-config {path}: needs an `instances:` list"


def test_more_processes_than_instances_are_refused() -> None:
    """--fleet-processes above --num-instances is refused: a process would serve nothing."""
    message = fleet_error([*BASE, "--num-instances", "3", "--fleet-processes", "4"])
    assert message == "fleet-processes (4) cannot exceed num-instances (3)"


def test_as_many_processes_as_instances_are_accepted() -> None:
    """One process per instance is the most --fleet-processes may ask for."""
    cfg, configs = fleet([*BASE, "--num-instances", "3", "--fleet-processes", "3"])
    assert cfg.fleet_processes == 3 and len(configs) == 3


# --- the flags' rules ------------------------------------------------------------------------


@pytest.mark.parametrize("count", ["0", "1001"])
def test_num_instances_is_between_1_and_1000(count: str) -> None:
    """--num-instances 0 and 1001 are refused by the flag's rule."""
    assert config_error([*BASE, "--num-instances", count]) == (
        "num instances must be between 1 and 1000"
    )


def test_a_thousand_instances_are_accepted() -> None:
    """1000, the rule's upper bound, is accepted."""
    assert load_config([*BASE, "--num-instances", "1000"], {}).num_instances == 1000


def test_a_fleet_has_no_data_parallel_ranks() -> None:
    """--num-instances 2 with --data-parallel-size 2 is refused."""
    message = config_error([*BASE, "--num-instances", "2", "--data-parallel-size", "2"])
    assert "num-instances and data-parallel-size cannot both be above 1" in message


def test_the_fleets_last_port_must_exist() -> None:
    """port + N - 1 above 65535 is refused; exactly 65535 is accepted."""
    message = config_error(["--model", "m", "--port", "65535", "--num-instances", "2"])
    assert message == "fleet ports (port + num-instances - 1) cannot exceed 65535"
    assert load_config(["--model", "m", "--port", "65534", "--num-instances", "2"], {})


def test_the_fleets_last_kv_event_port_must_exist() -> None:
    """A ZMQ endpoint whose port, offset by the last instance's index, passes 65535 is
    refused, as it is for data-parallel ranks."""
    config_error([*BASE, "--num-instances", "2", "--zmq-endpoint", "tcp://127.0.0.1:65535"])


def test_a_missing_fleet_file_is_refused(tmp_path: Path) -> None:
    """A --fleet-config file that does not exist is refused when the command line is read."""
    missing = tmp_path / "nowhere.yaml"
    message = config_error([*BASE, "--num-instances", "2", "--fleet-config", str(missing)])
    assert message == f"fleet-config file {missing} not found"


@pytest.mark.parametrize("count", ["0", "257"])
def test_fleet_processes_is_between_1_and_256(count: str) -> None:
    """--fleet-processes 0 and 257 are refused by the flag's rule."""
    assert config_error([*BASE, "--num-instances", "2", "--fleet-processes", count]) == (
        "fleet processes must be between 1 and 256"
    )


# --- groups ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instances", "processes", "sizes"),
    [(10, 3, [4, 3, 3]), (3, 2, [2, 1]), (4, 4, [1, 1, 1, 1]), (5, 1, [5]), (8, 3, [3, 3, 2])],
)
def test_groups_are_contiguous_and_balanced(
    instances: int, processes: int, sizes: list[int]
) -> None:
    """Every instance is in exactly one group, in order, and sizes differ by one at most,
    the larger groups first."""
    _, configs = fleet([*BASE, "--num-instances", str(instances)])
    parts = groups(configs, processes)
    assert [len(part) for part in parts] == sizes
    assert [c.port for part in parts for c in part] == [8000 + i for i in range(instances)]


def test_an_instance_runs_the_schedule_its_entry_gives(tmp_path: Path) -> None:
    text = "instances:\n  - phases:\n      - duration: 1s\n        latency-factor: 2\n  - {}\n"
    _, configs = fleet(
        [*BASE, "--num-instances", "2", "--fleet-config", fleet_file(tmp_path, text)]
    )
    first, second = configs
    assert first.phases is not None and first.phases.phases[0].latency_factor == 2.0
    assert second.phases is None
    bad = "instances:\n  - phases:\n      - duration: 0s\n"
    assert fleet_error(
        [*BASE, "--num-instances", "2", "--fleet-config", fleet_file(tmp_path, bad)]
    ).startswith("fleet-config instance 0: phases[0].duration: duration must be at least 10ms")
