"""`python -m servefleet` is the `servefleet` command."""

import sys

from servefleet.cli.main import main

sys.exit(main())
