"""The HAProxy engine (`servefleet proxy --engine haproxy`): the proxy process
keeps its Watch stream and drives a child HAProxy that serves the HTTP port.

- layout.py: what HAProxy should do, decided from the proxy's state (pure);
- config.py: that layout as haproxy.cfg text (pure);
- servers.py: runtime API commands that take HAProxy's servers from what
  they are to what the layout wants (pure);
- cli.py: HAProxy's master CLI (runtime API) over its Unix socket;
- process.py: the HAProxy child: start, seamless reload, drain, stop;
- stats.py: HAProxy's counters read back as load reports;
- engine.py: the loop that keeps HAProxy in step with the Watch stream;
- serve.py: the process as a whole (HAProxy in front, the Python proxy
  behind it for what HAProxy does not do).
"""

# The proxy's engines (`servefleet proxy --engine`, `servefleet up --proxy-engine`).
ENGINES = ("python", "haproxy")
# HAProxy's default buffer (tune.bufsize), the engine's too (--engine-buffer-bytes).
DEFAULT_BUFFER_BYTES = 16384
