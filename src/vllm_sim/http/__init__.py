"""The HTTP kernel: an HTTP/1.1 server and an application that routes fully read requests
to handlers and writes their responses. It knows routes, bodies and statuses, and nothing
of what the handlers serve: the words of its errors come from the application (a Dialect)."""
