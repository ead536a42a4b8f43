"""The gRPC example: a text classifier with a unary and a server-streaming RPC."""
