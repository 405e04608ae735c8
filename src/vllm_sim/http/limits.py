"""What one connection may hold and for how long, and the phases its time is measured in."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one request's head may hold, how long each phase of a connection may take, and
    how much of a refused request is read and dropped before the connection closes."""

    max_head_bytes: int = 64 * 1024  # request line and header lines together
    max_headers: int = 256
    head_timeout: float = 30.0  # from a request's first byte to the end of its head
    body_timeout: float = 30.0  # the longest a request body may go without a byte
    keep_alive_timeout: float = 5.0  # an idle connection between requests
    # After an answer given before its request was all read (413, 431...): how long, and
    # how many more bytes, the connection goes on reading and dropping before it closes.
    # Closing a socket with unread input resets the connection, and the reset can destroy
    # the answer before the client reads it; both bounds keep a client that never stops
    # sending from holding the connection.
    linger_timeout: float = 2.0
    linger_bytes: int = 64 * 1024 * 1024


class Phase(Enum):
    """Where the parser is in the request it is reading."""

    IDLE = "idle"  # between requests: nothing of the next one read yet
    HEAD = "head"  # request line and headers
    BODY = "body"
    LINGER = "linger"  # answered and closing: what still arrives is dropped
