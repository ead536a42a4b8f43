"""Local runs: servefleet inside the script that uses it.

- `embedded`: `servefleet.run`, `start`, `delete`, `shutdown`: a controller
  and proxy started for the calling process;
- `specs`: an application graph made into what the controller deploys;
- `logs`: a local run's replica output on the script's terminal.

May import: applications, cli, handles, security, controller, public.
"""
