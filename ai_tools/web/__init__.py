"""The HTTP API of the standalone service (twisted.web)."""
