"""The HTTP kernel: an ASGI app that routes fully read requests to handlers and writes their
responses. It knows routes, bodies and statuses, and nothing of what the handlers serve."""
