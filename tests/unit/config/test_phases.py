"""The phase schedule setting: read from --phases (a file or inline), the --config YAML and
POST /admin/config alike, shown back so that it reads back the same, and refused with one
line naming the phase's index and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.config import load, load_error, write_yaml
from vllm_sim.config import ConfigError, apply_admin_update, config_to_dict
from vllm_sim.config.phases import Phase, PhaseKind, PhaseSchedule

SECOND = 1_000_000_000

SCHEDULE_YAML = """\
repeat: false
phases:
  - name: warm
    duration: 30s
  - name: slow
    duration: 1m30s
    latency-factor: 2
    failure-rate: 10
    failure-types: [rate_limit, server_error]
  - name: nap
    duration: 5s
    sleep: 2
  - duration: 2s
    restart: true
  - name: dead
    crash: true
    exit-code: 3
"""

EXPECTED = PhaseSchedule(
    (
        Phase(name="warm", duration=30 * SECOND),
        Phase(
            name="slow",
            duration=90 * SECOND,
            latency_factor=2.0,
            failure_rate=10,
            failure_types=("rate_limit", "server_error"),
        ),
        Phase(kind=PhaseKind.SLEEP, name="nap", duration=5 * SECOND, sleep_level=2),
        Phase(kind=PhaseKind.RESTART, duration=2 * SECOND),
        Phase(kind=PhaseKind.CRASH, name="dead", exit_code=3),
    )
)


def _file(tmp_path: Path, text: str, name: str = "phases.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_phases_file(tmp_path: Path) -> None:
    cfg = load("--model", "m", "--phases", _file(tmp_path, SCHEDULE_YAML))
    assert cfg.phases == EXPECTED


def test_the_same_list_under_the_config_files_phases_key(tmp_path: Path) -> None:
    nested = "model: m\nphases:\n" + "".join(f"  {line}\n" for line in SCHEDULE_YAML.splitlines())
    assert load("--config", write_yaml(tmp_path, nested)).phases == EXPECTED
    as_list = SCHEDULE_YAML.split("phases:\n", 1)[1]
    assert load("--config", write_yaml(tmp_path, "model: m\nphases:\n" + as_list)).phases == (
        EXPECTED
    )


def test_the_config_files_phases_key_may_name_a_file(tmp_path: Path) -> None:
    path = _file(tmp_path, SCHEDULE_YAML)
    assert load("--config", write_yaml(tmp_path, f"model: m\nphases: {path}\n")).phases == EXPECTED


def test_inline_json_as_a_fleet_entry_passes_it() -> None:
    text = '{"repeat": true, "phases": [{"duration": "1s"}, {"duration": "2s", "sleep": true}]}'
    cfg = load("--model", "m", "--phases", text)
    assert cfg.phases == PhaseSchedule(
        (
            Phase(duration=SECOND),
            Phase(kind=PhaseKind.SLEEP, duration=2 * SECOND, sleep_level=1),
        ),
        repeat=True,
    )


def test_no_schedule_by_default_and_an_empty_list_is_none() -> None:
    assert load("--model", "m").phases is None
    assert load("--model", "m", "--phases", "[]").phases is None


def test_switches_set_to_false_say_nothing() -> None:
    text = '[{"duration": "1s", "crash": false, "sleep": false, "restart": false}]'
    assert load("--model", "m", "--phases", text).phases == PhaseSchedule((Phase(duration=SECOND),))


def test_shown_by_admin_config_and_read_back_the_same(tmp_path: Path) -> None:
    cfg = load("--model", "m", "--phases", _file(tmp_path, SCHEDULE_YAML))
    shown = config_to_dict(cfg)
    assert shown["phases"]["repeat"] is False
    assert shown["phases"]["phases"][1] == {
        "name": "slow",
        "duration": "1m30s",
        "latency-factor": 2.0,
        "failure-rate": 10,
        "failure-types": ["rate_limit", "server_error"],
    }
    assert shown["phases"]["phases"][4] == {"name": "dead", "crash": True, "exit-code": 3}
    assert shown["latency-factor"] == 1.0
    cleared = apply_admin_update(cfg, b'{"phases": null}')
    assert cleared.phases is None
    body = json.dumps({"phases": shown["phases"]}).encode()
    assert apply_admin_update(cleared, body) == cfg


def test_admin_updates_the_latency_factor_and_refuses_a_bad_one() -> None:
    cfg = load("--model", "m")
    assert apply_admin_update(cfg, b'{"latency-factor": 2.5}').latency_factor == 2.5
    with pytest.raises(ConfigError, match="latency factor must be greater than 0"):
        apply_admin_update(cfg, b'{"latency-factor": 0}')


@pytest.mark.parametrize(
    ("phases", "message"),
    [
        ('[{"duration": "1s"}, {"latency-factor": 2}]', "phases[1].duration: required"),
        ('[{"duration": "-1s"}]', "phases[0].duration: duration must be at least 10ms"),
        ('[{"duration": "0s"}]', "phases[0].duration: duration must be at least 10ms, got 0s"),
        ('[{"duration": "1ns"}]', "phases[0].duration: duration must be at least 10ms, got 1ns"),
        ('[{"duration": "169h"}]', "phases[0].duration: duration cannot be more than 168h0m0s"),
        ('[{"duration": "5"}]', 'phases[0].duration: time: missing unit in duration "5"'),
        ('[{"duration": 5}]', "phases[0].duration: expected a duration such as 30s or 1m30s"),
        (
            '[{"duration": "1s", "latency-factor": 0}]',
            "phases[0].latency-factor: latency factor must be greater than 0 and at most 100",
        ),
        (
            '[{"duration": "1s"}, {"duration": "1s", "latency-factor": -2}]',
            "phases[1].latency-factor: latency factor must be greater than 0",
        ),
        (
            '[{"duration": "1s", "latency-factor": "x"}]',
            "phases[0].latency-factor: expected a number, got a string",
        ),
        ('[{"duration": "1s", "failure-rate": 101}]', "phases[0].failure-rate: failure rate"),
        ('[{"duration": "1s", "failure-rate": 1.5}]', "phases[0].failure-rate: expected an int"),
        (
            '[{"duration": "1s", "failure-types": ["nope"]}]',
            "phases[0].failure-types: invalid failure type 'nope'",
        ),
        ('[{"duration": "1s", "sleep": 3}]', "phases[0].sleep: sleep level must be 1 or 2"),
        ('[{"crash": true, "exit-code": 256}]', "phases[0].exit-code: exit code must be between"),
        ('[{"crash": true, "exit-code": -1}]', "phases[0].exit-code: exit code must be between"),
        ('[{"duration": "1s", "latncy-factor": 2}]', "phases[0]: unknown key 'latncy-factor'"),
        (
            '[{"crash": true, "duration": "1s"}]',
            "phases[0].duration: a crash phase takes only name, crash, exit-code",
        ),
        (
            '[{"duration": "1s", "sleep": 1, "latency-factor": 2}]',
            "phases[0].latency-factor: a sleep phase takes only name, duration, sleep",
        ),
        (
            '[{"duration": "1s", "restart": true, "crash": true}]',
            "phases[0]: restart and crash cannot be in one phase",
        ),
        ('[{"duration": "1s", "exit-code": 2}]', "phases[0].exit-code: a run phase takes only"),
        ('[{"crash": true}, {"duration": "1s"}]', "phases[1]: comes after the crash of phases[0]"),
        ('{"repeat": true, "phases": [{"crash": true}]}', "repeat: a schedule that ends in a"),
        ('{"phases": [], "again": 1}', "unknown key 'again' (a schedule takes phases, repeat)"),
        ('{"repeat": 1, "phases": []}', "repeat: expected true or false, got a number"),
        ('[{"duration": "1s", "restart": "yes"}]', "phases[0].restart: expected true or false"),
        ("[1]", "phases[0]: expected a mapping of phase keys, got a number"),
        ("[{", "phases: not valid YAML"),
    ],
)
def test_a_bad_schedule_is_one_line_naming_the_phase_and_key(phases: str, message: str) -> None:
    error = load_error("--model", "m", "--phases", phases)
    assert message in error
    assert "\n" not in error


def test_a_bad_schedule_in_admin_changes_nothing() -> None:
    cfg = load("--model", "m")
    with pytest.raises(ConfigError, match=r'field "phases": phases\[0\]: unknown key'):
        apply_admin_update(cfg, b'{"phases": [{"duration": "1s", "when": 2}]}')
    with pytest.raises(ConfigError, match=r"phases\[0\].latency-factor: latency factor"):
        apply_admin_update(cfg, b'{"phases": [{"duration": "1s", "latency-factor": 0}]}')
    with pytest.raises(ConfigError, match="phases: expected a list of phases, or a mapping"):
        apply_admin_update(cfg, b'{"phases": 5}')
    with pytest.raises(ConfigError, match="cannot unmarshal string into Go struct field"):
        apply_admin_update(cfg, b'{"phases": "/etc/passwd"}')


def test_a_bad_schedule_in_the_config_file_names_the_key(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "model: m\nphases:\n  - duration: 1s\n    crash: 1\n")
    error = load_error("--config", path)
    assert error.endswith('phases[0].crash: expected true or false, got a number (key "phases")')


def test_a_missing_or_odd_phases_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    assert f"phases file {missing}: no such file or directory" in load_error(
        "--model", "m", "--phases", missing
    )
    assert "is not a regular file" in load_error("--model", "m", "--phases", str(tmp_path))


def test_the_other_settings_load_unchanged_beside_a_schedule(tmp_path: Path) -> None:
    """A Go simulator file keeps loading: the new keys only add to it."""
    text = "model: m\ntime-to-first-token: 500\nphases:\n  - duration: 1s\n"
    cfg = load("--config", write_yaml(tmp_path, text))
    assert cfg.time_to_first_token == 500_000_000 and cfg.phases is not None
    assert load("--config", write_yaml(tmp_path, "model: m\n")).phases is None


def test_the_documented_example_loads() -> None:
    example = Path(__file__).resolve().parents[3] / "docs" / "phases.yaml"
    schedule = load("--model", "m", "--phases", str(example)).phases
    assert schedule is not None
    kinds = [phase.kind for phase in schedule.phases]
    assert kinds == [PhaseKind.RUN] * 3 + [
        PhaseKind.SLEEP, PhaseKind.RESTART, PhaseKind.RUN, PhaseKind.CRASH,
    ]  # fmt: skip
