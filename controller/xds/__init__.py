"""The controller's xDS management server (ads.py) and its resources (resources.py)."""
