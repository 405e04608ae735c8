"""Logging, set up once per process from the configuration, before anything logs (data
parallel ranks are forked later and inherit it)."""

from __future__ import annotations

import logging
import re
import sys

from vllm_sim.config import Config
from vllm_sim.http.state import ACCESS_LOG

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
http_log = logging.getLogger("vllm_sim.http")

# Query parameters that may carry a secret; their values never reach the access log.
_SECRET_QUERY = re.compile(
    r"([?&](?:api[_-]?key|key|token|access[_-]?token|auth|password|secret)=)[^&#\s]*",
    re.IGNORECASE,
)


def redact_query(target: str) -> str:
    """`/v1/models?api_key=sk-1&x=2` -> `/v1/models?api_key=[REDACTED]&x=2`."""
    return _SECRET_QUERY.sub(r"\1[REDACTED]", target) if "?" in target else target


class RedactSecrets(logging.Filter):
    """Rewrites the access-log line (client, method, path?query, version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_query(args[2]), *args[3:])
        return True


# --uvicorn-log-level's names; `trace` is below debug, as it was in uvicorn.
_LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": 5,
}


def _configure_http_logs(cfg: Config) -> None:
    """The HTTP server's own lines at --uvicorn-log-level; request lines when asked for,
    whatever that level says, as vLLM's request log (--enable-log-requests) is its own."""
    http_log.setLevel(_LEVELS[cfg.uvicorn_log_level])
    access = logging.getLogger(ACCESS_LOG)
    access.addFilter(RedactSecrets())
    access.setLevel(logging.INFO if cfg.log_http or cfg.enable_log_requests else logging.WARNING)
    if http_log.getEffectiveLevel() <= logging.INFO and not logging.getLogger().isEnabledFor(
        logging.INFO
    ):
        # Asked-for info lines show even when the root logger is quieter.
        _own_handler(http_log)
    if access.isEnabledFor(logging.INFO):
        _own_handler(access)


def _own_handler(logger: logging.Logger) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    logger.propagate = False


def configure_logging(cfg: Config) -> None:
    """klog's -v sets the simulator's level; the HTTP server's own lines and the request
    log follow vLLM's flags."""
    logging.basicConfig(
        level=logging.INFO if cfg.verbosity >= 2 else logging.WARNING,
        format=LOG_FORMAT,
        stream=sys.stderr,
    )
    _configure_http_logs(cfg)
