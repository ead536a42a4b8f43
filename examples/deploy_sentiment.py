"""Deploy the sentiment example through the Python SDK and show what was stored.

    python examples/deploy_sentiment.py [--controller 127.0.0.1:7373]
"""

from __future__ import annotations

import argparse
import json

from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--controller", default=None,
                        help="controller addresses (default: $SERVEFLEET_CONTROLLER)")
    args = parser.parse_args()
    spec = d.DeploymentSpec(
        name="Sentiment",
        application="demo",
        import_path="examples.sentiment:SentimentModel",
        init_kwargs_json=json.dumps({"name": "sentiment-v1"}),
        route_prefix="/sentiment",
        replica_config=d.ReplicaConfig(
            num_replicas=2,
            user_config_json=json.dumps({"threshold": 1}),
        ),
    )
    with ControllerClient(args.controller) as client:
        reply = client.deploy(spec)
        print(f"deployed demo/Sentiment version {reply.version} "
              f"({'updating' if reply.updating else 'unchanged'})")


if __name__ == "__main__":
    main()
