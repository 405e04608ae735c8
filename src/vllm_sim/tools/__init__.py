"""Programs that run beside the simulator: the container's health check and a KV-event
listener for deployments without a KV-cache indexer."""
