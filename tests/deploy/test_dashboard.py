"""deploy/grafana's dashboard and deploy/prometheus's scrape configuration against a running
simulator: every metric and label the dashboard's PromQL names is in a live scrape, a real
Prometheus scraping the simulator answers every query, and promtool accepts the config."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.fixtures import server_fixture
from tests.support.metrics import CHAT, Metrics, chat, scrape
from tests.support.server import SimServer, free_port

DEPLOY = Path(__file__).parents[2] / "deploy"
DASHBOARD_FILE = DEPLOY / "grafana" / "vllm-sim-dashboard.json"
SCRAPE_CONFIG = DEPLOY / "prometheus" / "prometheus.yaml"
LORA = "l1"
# Labels Prometheus attaches to every scraped series (the last two by the Kubernetes job's
# relabelling): the simulator's page does not carry them.
TARGET_LABELS = frozenset({"instance", "job", "namespace", "pod"})
LOCAL_JOB = "vllm-sim"
KUBERNETES_JOB = "vllm-sim-pods"

# A metric name in PromQL: vLLM's families and the HTTP and process collectors' ones.
METRIC = re.compile(r"\b(?:vllm:[a-zA-Z0-9_:]+|(?:http|process)_[a-zA-Z0-9_]+)")
SELECTOR = re.compile(r"(?P<metric>vllm:[\w:]+|(?:http|process)_\w+)\{(?P<matchers>[^}]*)\}")
MATCHER = re.compile(r'(?P<label>\w+)\s*(?P<op>=~|!~|!=|=)\s*"(?P<value>[^"]*)"')
# An aggregation's grouping written before its argument: `sum by (le) (...)`.
GROUPING = re.compile(r"\b(?:by|without)\s*\((?P<labels>[^)]*)\)\s*\(")
# A binary operator's label matching: `on (...)`, `group_left (...)` and the like.
VECTOR_MATCHING = re.compile(r"\b(?:on|ignoring|group_left|group_right)\s*\((?P<labels>[^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\((?P<selector>[^,]+),\s*(?P<label>\w+)\)")

LORA_MODULE = json.dumps({"name": LORA, "path": "/x"})
sim = server_fixture(["--enable-lora", "--max-loras", "2", "--lora-modules", LORA_MODULE])


# ---- the dashboard's parts ---------------------------------------------------------------


def _load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return dashboard


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows included, and the panels a collapsed row holds."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in _panels(dashboard) if panel["type"] != "row"]


def _variables(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in dashboard["templating"]["list"]}


def _variable_query(variable: dict[str, Any]) -> str:
    """A query variable's PromQL: Grafana stores it as a string or as {"query": ...}."""
    query = variable["query"]
    return str(query["query"] if isinstance(query, dict) else query)


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, query) for every panel target and every query variable."""
    found = [
        (f"panel {panel['title']!r}", str(target["expr"]))
        for panel in _query_panels(dashboard)
        for target in panel["targets"]
    ]
    found += [
        (f"variable ${name}", _variable_query(variable))
        for name, variable in _variables(dashboard).items()
        if variable["type"] == "query"
    ]
    return found


DASHBOARD = _load_dashboard()
QUERIES = _queries(DASHBOARD)


# ---- PromQL, as far as the checks need it --------------------------------------------------


def _argument(expr: str, opening: int) -> str:
    """The text inside the parenthesis that opens at `opening`."""
    depth = 0
    for index in range(opening, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[index], 0)
        if depth == 0:
            return expr[opening + 1 : index]
    raise AssertionError(f"unbalanced parentheses: {expr}")


def _label_uses(expr: str) -> list[tuple[str, set[str]]]:
    """(label, metrics that must carry it) for each label a query groups, matches or lists by."""
    uses: list[tuple[str, set[str]]] = []
    for match in SELECTOR.finditer(expr):
        for matcher in MATCHER.finditer(match["matchers"]):
            uses.append((matcher["label"], {match["metric"]}))
    for match in GROUPING.finditer(expr):
        metrics = set(METRIC.findall(_argument(expr, match.end() - 1)))
        uses += [(label, metrics) for label in _label_list(match["labels"])]
    for match in VECTOR_MATCHING.finditer(expr):
        uses += [(label, set(METRIC.findall(expr))) for label in _label_list(match["labels"])]
    for match in LABEL_VALUES.finditer(expr):
        uses.append((match["label"], set(METRIC.findall(match["selector"]))))
    return uses


def _label_list(text: str) -> list[str]:
    return [label.strip() for label in text.split(",") if label.strip()]


def _concrete(expr: str, model: str) -> str:
    """`expr` as Grafana would send it with every variable at "All" and one model chosen."""
    for interval in ("$__rate_interval", "$__interval", "$__range"):
        expr = expr.replace(interval, "1m")
    expr = expr.replace("$model_name", model)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def _matches(op: str, pattern: str, actual: str) -> bool:
    if op in ("=", "!="):
        return (actual == pattern) == (op == "=")
    return (re.fullmatch(pattern, actual) is not None) == (op == "=~")


def _selects(matchers: str, labels: dict[str, str], model: str) -> bool:
    """Whether a series with `labels` satisfies every matcher whose value the scrape can
    decide (a label the series lacks has the value "", as in Prometheus)."""
    for matcher in MATCHER.finditer(matchers):
        value = matcher["value"].replace("$model_name", model)
        if matcher["label"] in TARGET_LABELS or "$" in value:
            continue
        if not _matches(matcher["op"], value, labels.get(matcher["label"], "")):
            return False
    return True


# ---- the live simulator --------------------------------------------------------------------


def _send_traffic(server: SimServer) -> None:
    """Requests that give every counter and histogram the dashboard reads a sample: a few
    to the base model (several tokens each, for the inter-token histograms) and one to
    the LoRA, for lora_requests_info's running adapters."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for model in (server.model, server.model, server.model, LORA):
            reply = client.post(CHAT, json=chat(model=model, max_tokens=5))
            assert reply.status_code == 200, reply.text


@pytest.fixture(scope="module")
def page(sim: SimServer) -> Metrics:
    _send_traffic(sim)
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        return scrape(client)


@pytest.fixture(scope="module")
def labels_by_sample(page: Metrics) -> dict[str, set[str]]:
    return {
        name: {label for labels, _ in series for label in labels}
        for name, series in page.samples.items()
    }


# ---- 1. the dashboard's shape ---------------------------------------------------------------


def test_dashboard_declares_its_variables() -> None:
    assert DASHBOARD["schemaVersion"] >= 39
    variables = _variables(DASHBOARD)
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    model = variables["model_name"]
    assert model["type"] == "query"
    assert _variable_query(model) == "label_values(vllm:num_requests_running, model_name)"
    assert variables["instance"]["type"] == "query"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_panel_queries_the_chosen_datasource() -> None:
    ids = [panel["id"] for panel in _panels(DASHBOARD)]
    assert len(ids) == len(set(ids)), sorted(ids)
    for panel in _query_panels(DASHBOARD):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        assert [t for t in panel["targets"] if t.get("expr")], panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]


def test_groupings_come_before_their_argument() -> None:
    """The label checks below read `sum by (x) (...)`; a trailing `sum (...) by (x)` would
    slip past them."""
    for where, query in QUERIES:
        written = len(re.findall(r"\b(?:by|without)\s*\(", query))
        assert written == len(GROUPING.findall(query)), (where, query)


# ---- 2. the names against a live scrape -------------------------------------------------------


def test_every_metric_is_in_the_scrape(page: Metrics) -> None:
    """Each name must be a sample name of the page as it stands: a histogram is read through
    its _bucket/_sum/_count samples and a counter through its _total one."""
    missing = {
        (where, name)
        for where, query in QUERIES
        for name in METRIC.findall(query)
        if name not in page.samples
    }
    assert not missing, sorted(missing)


def test_every_label_is_on_its_metric(labels_by_sample: dict[str, set[str]]) -> None:
    missing = {
        (where, label, metric)
        for where, query in QUERIES
        for label, metrics in _label_uses(query)
        for metric in metrics
        if label not in TARGET_LABELS and label not in labels_by_sample.get(metric, set())
    }
    assert not missing, sorted(missing)


def test_every_selector_selects_a_series(page: Metrics, sim: SimServer) -> None:
    """A literal matcher (`reason="capacity"`, `finished_reason=~"abort|error"`) names a
    label value the simulator shows for the model."""
    empty = {
        (where, match[0])
        for where, query in QUERIES
        for match in SELECTOR.finditer(query)
        if not any(
            _selects(match["matchers"], labels, sim.model)
            for labels, _ in page.series(match["metric"])
        )
    }
    assert not empty, sorted(empty)


# ---- 3. the queries through a real Prometheus ---------------------------------------------


def _local_scrape_config(server: SimServer) -> dict[str, Any]:
    """The committed static job, pointed at the test's simulator and scraping every second."""
    committed = yaml.safe_load(SCRAPE_CONFIG.read_text())
    [job] = [job for job in committed["scrape_configs"] if job["job_name"] == LOCAL_JOB]
    job["static_configs"] = [{"targets": [f"{server.host}:{server.port}"]}]
    return {"global": {"scrape_interval": "1s"}, "scrape_configs": [job]}


def _await_scrapes(
    client: httpx.Client, count: int, process: subprocess.Popen[bytes], log: Path
) -> None:
    """Waits until Prometheus has scraped the simulator successfully `count` times."""
    query = f'sum_over_time(up{{job="{LOCAL_JOB}"}}[1m])'
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        if _scraped(client, query) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"prometheus did not scrape the simulator {count} times")


def _scraped(client: httpx.Client, query: str) -> float:
    try:
        reply = client.get("/api/v1/query", params={"query": query})
    except httpx.TransportError:
        return 0  # not listening yet
    if reply.status_code != 200:
        return 0  # listening, but answering 503 until its storage is ready
    result = reply.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0


@pytest.fixture(scope="module")
def prometheus(
    sim: SimServer, page: Metrics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    """A Prometheus scraping the simulator, once before and twice after more traffic, so
    that rates over the window are not all zero (`page` sent the first traffic)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not on PATH (Debian package `prometheus`)")
    root = tmp_path_factory.mktemp("prometheus")
    config = root / "prometheus.yaml"
    config.write_text(yaml.safe_dump(_local_scrape_config(sim)))
    port = free_port()
    command = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={root / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    log = root / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            _await_scrapes(client, 1, process, log)
            _send_traffic(sim)
            _await_scrapes(client, 3, process, log)
            yield client
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _instant_query(client: httpx.Client, query: str) -> dict[str, Any]:
    answer: dict[str, Any] = client.get("/api/v1/query", params={"query": query}).json()
    return answer


def test_prometheus_answers_every_panel(prometheus: httpx.Client, sim: SimServer) -> None:
    """Every target parses and runs; every panel shows some series for a simulator that
    served requests."""
    failures: list[tuple[str, str, Any]] = []
    blank: list[str] = []
    for panel in _query_panels(DASHBOARD):
        shown = False
        for target in panel["targets"]:
            query = _concrete(target["expr"], sim.model)
            answer = _instant_query(prometheus, query)
            if answer["status"] != "success":
                failures.append((panel["title"], query, answer.get("error")))
            shown = shown or bool(answer.get("data", {}).get("result"))
        if not shown:
            blank.append(panel["title"])
    assert not failures, failures
    assert not blank, blank


def test_prometheus_lists_the_variables_values(prometheus: httpx.Client, sim: SimServer) -> None:
    """The variables' label_values() queries, as Grafana runs them: a label-values call."""
    expected = {"model_name": sim.model, "instance": f"{sim.host}:{sim.port}"}
    for name, variable in _variables(DASHBOARD).items():
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.fullmatch(_variable_query(variable))
        assert match is not None, variable
        selector = _concrete(match["selector"], sim.model)
        path = f"/api/v1/label/{match['label']}/values"
        answer = prometheus.get(path, params={"match[]": selector}).json()
        assert answer["status"] == "success", answer
        assert expected[name] in answer["data"], (name, answer)


# ---- 4. the scrape configuration ------------------------------------------------------------


def _promtool_check(config: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not on PATH (Debian package `prometheus`)")
    return subprocess.run(
        ["promtool", "check", "config", str(config)], capture_output=True, text=True, timeout=30
    )


def test_promtool_accepts_the_scrape_config() -> None:
    checked = _promtool_check(SCRAPE_CONFIG)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _uncommented_config() -> str:
    """The config with its commented Kubernetes job (the file's tail) switched on."""
    text = SCRAPE_CONFIG.read_text()
    start = text.index(f"  # - job_name: {KUBERNETES_JOB}")
    return text[:start] + re.sub(r"(?m)^  # ?", "  ", text[start:])


def test_kubernetes_job_keeps_the_simulators_http_port() -> None:
    jobs = yaml.safe_load(_uncommented_config())["scrape_configs"]
    [job] = [job for job in jobs if job["job_name"] == KUBERNETES_JOB]
    assert job["metrics_path"] == "/metrics"
    assert [sd["role"] for sd in job["kubernetes_sd_configs"]] == ["pod"]
    keeps = {
        rule["source_labels"][0]: rule["regex"]
        for rule in job["relabel_configs"]
        if rule.get("action") == "keep"
    }
    assert keeps == {
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "vllm-sim",
        "__meta_kubernetes_pod_container_port_name": "http",
    }


def test_promtool_accepts_the_kubernetes_job(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yaml"
    config.write_text(_uncommented_config())
    checked = _promtool_check(config)
    output = checked.stdout + checked.stderr
    if "field kubernetes_sd_configs not found" in output:
        pytest.skip("this promtool is built without Kubernetes service discovery")
    assert checked.returncode == 0, output
