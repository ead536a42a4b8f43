"""The controller: gRPC API, leader election, hard state, reconcile loop."""
