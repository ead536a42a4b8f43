"""The servefleet command line."""
