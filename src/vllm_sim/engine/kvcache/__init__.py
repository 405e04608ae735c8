"""Simulated KV cache: block hashing, the prefix cache and KV events."""
