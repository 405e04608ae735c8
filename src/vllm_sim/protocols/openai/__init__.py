"""OpenAI's API: chat, completions, responses, embeddings, models and vLLM's render routes."""
