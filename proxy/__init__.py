"""The HTTP proxy data plane (issue 4)."""
