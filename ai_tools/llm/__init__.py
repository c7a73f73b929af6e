"""The model layer: OpenAI-compatible chat clients over treq, SSE, tool-call parsing, tokens."""
