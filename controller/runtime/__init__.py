"""Runtimes that run replicas: the interface and the process runtime."""

from .base import ReplicaLaunch, Runtime, RuntimeReplica

__all__ = ["ReplicaLaunch", "Runtime", "RuntimeReplica"]
