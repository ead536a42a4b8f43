"""Deploy the sentiment example through the Python SDK and wait until it runs.

    python examples/deploy_sentiment.py [--controller 127.0.0.1:7373] [--timeout 60]

Prints a curl command for each running replica. It works from any directory:
the spec's working_dir, where replicas import the code from, is this file's
own directory, by its absolute path.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, status_pb2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--controller", default=None,
                        help="controller addresses (default: $SERVEFLEET_CONTROLLER)")
    parser.add_argument("--timeout", type=float, default=60,
                        help="seconds to wait for the replicas to run")
    args = parser.parse_args()
    spec = d.DeploymentSpec(
        name="Sentiment",
        application="demo",
        import_path="sentiment:SentimentModel",
        init_kwargs_json=json.dumps({"name": "sentiment-v1"}),
        route_prefix="/sentiment",
        runtime=d.RuntimeOptions(working_dir=os.path.dirname(os.path.abspath(__file__))),
        replica_config=d.ReplicaConfig(
            num_replicas=2,
            user_config_json=json.dumps({"threshold": 1}),
        ),
    )
    with ControllerClient(args.controller) as client:
        reply = client.deploy(spec)
        print(f"deployed demo/Sentiment version {reply.version} "
              f"({'updating' if reply.updating else 'unchanged'})")
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            status = next(dep for app in client.status().applications if app.name == "demo"
                          for dep in app.deployments if dep.name == "Sentiment")
            if status.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY:
                break
            if status.status == status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED:
                sys.exit(f"demo/Sentiment failed to deploy: {status.message}")
            time.sleep(0.2)
        else:
            sys.exit(f"demo/Sentiment not running after {args.timeout:g}s: {status.message}")
        print("running; each replica can also be asked directly:")
        for info in client.replicas(application="demo", deployment="Sentiment"):
            if info.state == replica_pb2.REPLICA_STATE_RUNNING:
                print(f"  curl 'http://{info.record.http_address}/?text=what+a+great+day'")


if __name__ == "__main__":
    main()
