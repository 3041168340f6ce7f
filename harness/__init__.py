"""evalaware: measure whether an LLM can tell evaluation prompts from real use."""

__version__ = "0.1.0"
