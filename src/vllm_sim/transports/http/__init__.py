"""The HTTP transport: the route table of every protocol on the HTTP kernel."""
