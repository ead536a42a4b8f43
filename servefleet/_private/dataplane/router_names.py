"""The names of the request routers servefleet ships (routers.py), known to
the controller's validation without importing the routers themselves."""

POWER_OF_TWO = "power_of_two"
PREFIX_AFFINITY = "prefix_affinity"
BUILTIN_ROUTERS = (POWER_OF_TWO, PREFIX_AFFINITY)
