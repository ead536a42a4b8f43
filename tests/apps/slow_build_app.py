"""An application whose import takes SLOW_BUILD_S seconds (default 30): for
build cancellation and failover-during-build tests."""

import os
import time

from graph_app import hello

time.sleep(float(os.environ.get("SLOW_BUILD_S", "30")))

app = hello.bind()
