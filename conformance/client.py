"""Sends one case to one server and keeps the answer as it came (a stream read to its end)."""

from __future__ import annotations

import http.client

from conformance.case import Case
from conformance.compare import Exchange


def send(case: Case, host: str, port: int, timeout: float = 120.0) -> Exchange:
    # http.client rather than a higher-level client: it sends exactly the method, headers and
    # bytes given (malformed bodies, odd content types) and hands back the raw body.
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request(
            case.method, case.path, body=case.payload(), headers=case.request_headers()
        )
        response = connection.getresponse()
        body = response.read()
        headers: dict[str, str] = {}
        for name, value in response.getheaders():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return Exchange(response.status, headers, body)
    except (OSError, http.client.HTTPException) as error:
        return Exchange(0, error=f"{type(error).__name__}: {error}")
    finally:
        connection.close()
