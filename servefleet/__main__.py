"""`python -m servefleet` is the `servefleet` command."""

import sys

from servefleet._private.cli.main import main

sys.exit(main())
