"""A deployment whose replica process exits with code 7 while loading."""

import os
import sys

print("exits_app: giving up on purpose", flush=True)
sys.stderr.flush()
os._exit(7)
