"""Generated from proto/servefleet/v1 by scripts/gen-proto. Do not edit."""
