"""When the engine's tokens come: the timing strategies its scheduler core consults."""
