"""Request parts several protocols share: conversations, tools, logprobs, sampling knobs."""
