"""`python -m servefleet.replica`: run one replica (started by a runtime)."""

import sys

from .main import main

sys.exit(main())
