"""An application whose import takes SLOW_BUILD_S seconds (default 30): for
build cancellation and failover-during-build tests. With BUILD_MARKER set,
its import first creates that file (a test proves no build ran)."""

import os
import time

from graph_app import hello

if os.environ.get("BUILD_MARKER"):
    open(os.environ["BUILD_MARKER"], "w").close()
time.sleep(float(os.environ.get("SLOW_BUILD_S", "30")))

app = hello.bind()
