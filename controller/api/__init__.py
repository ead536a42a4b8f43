"""The controller's gRPC face: the leader gate, the servicer, status replies."""
