"""The one request path every generation request runs, whatever its protocol and transport."""
