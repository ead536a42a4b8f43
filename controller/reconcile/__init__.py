"""Making the world match the goals: the generic loop, pure decisions and
transitions, and the replica and build I/O they drive."""
