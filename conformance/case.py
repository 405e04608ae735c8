"""What one conformance case sends, and how its answers are compared."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from conformance.oracle import Profile

MessageMode = Literal["exact", "masked", "skip"]


@dataclass(frozen=True)
class Case:
    """One request sent to both servers.

    `body` is sent as JSON; `raw` is sent verbatim instead (malformed bodies). The comparison
    knobs: `ignore_values` names keys whose values depend on generated content here (so only
    their kind is compared), `exact_values` keys whose values are fixed by the request,
    `compare_headers` response headers compared besides content-type, `message` how error
    texts compare (`masked` replaces digits, for texts that quote token counts), and
    `counts` whether a stream's per-kind chunk counts must match (false when the length of
    the output depends on content); `profile` which set-up of both servers it runs on."""

    name: str
    path: str
    method: str = "GET"
    body: Any = None
    raw: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    compare_headers: tuple[str, ...] = ()
    ignore_values: frozenset[str] = frozenset()
    exact_values: frozenset[str] = frozenset()
    message: MessageMode = "exact"
    counts: bool = True
    note: str = ""
    profile: Profile = "plain"  # the servers' set-up the case needs

    def payload(self) -> bytes | None:
        if self.raw is not None:
            return self.raw
        if self.body is None:
            return None
        return json.dumps(self.body).encode()

    def request_headers(self) -> dict[str, str]:
        headers = {}
        if self.body is not None:
            headers["Content-Type"] = "application/json"
        headers.update(self.headers)
        return headers


def get(name: str, path: str, **options: Any) -> Case:
    return Case(name=name, path=path, method="GET", **options)


def post(name: str, path: str, body: Any, **options: Any) -> Case:
    return Case(name=name, path=path, method="POST", body=body, **options)


def merged(base: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of a request body with some fields changed; a value of None removes the field."""
    out = {k: v for k, v in base.items() if k not in changes}
    out.update({k: v for k, v in changes.items() if v is not None})
    return out
