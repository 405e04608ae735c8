"""CPU KV offloading as vLLM 0.32 configures it: `--kv-offloading-size` (GiB) with
`--kv-offloading-backend`, or the connector itself in `--kv-transfer-config`.

vLLM (config/vllm.py `_post_init_kv_transfer_config`) turns the size into a KV transfer
config: the `native` backend into the OffloadingConnector with `cpu_bytes_to_use` = size x
2^30 in its extra config, `lmcache` into the LMCacheMPConnector (whose server owns the
memory: vLLM passes it no size); `kv_role` becomes `kv_both`, and a connector given in
--kv-transfer-config is replaced. The backend alone, without a size, does nothing. The
same connectors given in --kv-transfer-config are the same thing here: OffloadingConnector
with `cpu_bytes_to_use`, and LMCacheConnectorV1 / LMCacheMPConnector, whose CPU memory is
LMCache's `max_local_cpu_size` (GiB; `lmcache.max_local_cpu_size` in the extra config,
else LMCache's default of 5). The size is the engine's, over all its tensor-parallel ranks
(vLLM's wording); each data-parallel rank has its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Config

GIB = 1 << 30
NATIVE_CONNECTOR = "OffloadingConnector"
LMCACHE_CONNECTORS = ("LMCacheConnectorV1", "LMCacheMPConnector")
LMCACHE_DEFAULT_GIB = 5.0
"""LMCache's default `max_local_cpu_size`, GiB."""
MAX_OFFLOADING_GIB = 1 << 20  # a bound that keeps the byte count an exact, sane integer
KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")


@dataclass(frozen=True, slots=True)
class CpuOffload:
    """The CPU tier an engine has: its bytes, the connector vLLM would run, and whether its
    events carry their blocks' payload (the connector's `self_describing_kv_events`)."""

    cpu_bytes: int
    connector: str
    self_describing_events: bool = False


def cpu_offload(cfg: Config) -> CpuOffload | None:
    """The CPU offloading `cfg` sets up; None without. The config is valid (see
    `offload_error`)."""
    size = cfg.kv_offloading_size
    transfer = cfg.kv_transfer_config or {}
    extra = _extra(transfer)
    describing = bool(extra.get("self_describing_kv_events", False))
    if size is not None:
        native = cfg.kv_offloading_backend == "native"
        connector = NATIVE_CONNECTOR if native else "LMCacheMPConnector"
        return CpuOffload(int(size * GIB), connector, describing)
    named = transfer.get("kv_connector")
    if named == NATIVE_CONNECTOR:
        return CpuOffload(int(float(extra["cpu_bytes_to_use"])), named, describing)
    if named in LMCACHE_CONNECTORS:
        gib = float(extra.get("lmcache.max_local_cpu_size", LMCACHE_DEFAULT_GIB))
        return CpuOffload(int(gib * GIB), str(named), describing)
    return None


def _extra(transfer: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = transfer.get("kv_connector_extra_config")
    return extra if isinstance(extra, Mapping) else {}


def _positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def offload_size_error(size: float | None) -> str | None:
    """--kv-offloading-size: vLLM's CPU spec refuses a size of no bytes."""
    if size is None:
        return None
    if not (math.isfinite(size) and 0 < size <= MAX_OFFLOADING_GIB):
        return "cpu_bytes_to_use must be specified in kv_connector_extra_config"
    if int(size * GIB) <= 0:
        return "cpu_bytes_to_use must be specified in kv_connector_extra_config"
    return None


def transfer_config_error(cfg: Config) -> str | None:
    """An offloading connector in --kv-transfer-config, as vLLM refuses it (without
    --kv-offloading-size, which replaces it)."""
    transfer = cfg.kv_transfer_config
    if not transfer or cfg.kv_offloading_size is not None:
        return None
    connector = transfer.get("kv_connector")
    if connector != NATIVE_CONNECTOR and connector not in LMCACHE_CONNECTORS:
        return None
    role = transfer.get("kv_role")
    if role is None:
        return f"Please specify kv_role when kv_connector is set, supported roles are {KV_ROLES}"
    if role not in KV_ROLES:
        return f"Unsupported kv_role: {role}. Supported roles are {KV_ROLES}"
    extra = _extra(transfer)
    if connector == NATIVE_CONNECTOR:
        cpu_bytes: Any = extra.get("cpu_bytes_to_use")
        if not _positive(cpu_bytes) or cpu_bytes > MAX_OFFLOADING_GIB * GIB:
            return "cpu_bytes_to_use must be specified in kv_connector_extra_config"
    else:
        gib = extra.get("lmcache.max_local_cpu_size", LMCACHE_DEFAULT_GIB)
        if not _positive(gib) or gib > MAX_OFFLOADING_GIB:
            return "lmcache.max_local_cpu_size must be a positive number of GiB"
    return None
