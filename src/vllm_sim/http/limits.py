"""What one connection may hold and for how long, and the phases its time is measured in."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one request's head may hold, and how long each phase of a connection may take."""

    max_head_bytes: int = 64 * 1024  # request line and header lines together
    max_headers: int = 256
    head_timeout: float = 30.0  # from a request's first byte to the end of its head
    body_timeout: float = 30.0  # the longest a request body may go without a byte
    keep_alive_timeout: float = 5.0  # an idle connection between requests


class Phase(Enum):
    """Where the parser is in the request it is reading."""

    IDLE = "idle"  # between requests: nothing of the next one read yet
    HEAD = "head"  # request line and headers
    BODY = "body"
