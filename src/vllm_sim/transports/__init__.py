"""The transports a request arrives by, each an adapter over the front end."""
