"""The replica service hosting user code (issue 3)."""
