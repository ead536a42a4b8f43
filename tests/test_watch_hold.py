"""A standby holds a Watch while the leader it would name is gone (api/gate.py),
with real controllers on a real etcd."""

from __future__ import annotations

import time

import grpc
import pytest

from servefleet._private.wire import LEADER_METADATA_KEY
from servefleet.v1 import controller_pb2_grpc, watch_pb2

pytestmark = pytest.mark.slow


def watch(address: str, timeout: float):
    """The first response of a Watch of the route table, or the RpcError."""
    with grpc.insecure_channel(address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        responses = stub.Watch(watch_pb2.WatchRequest(watcher_id="hold-test",
                                                      known={"routes": ""}), timeout=timeout)
        try:
            return next(responses)
        except grpc.RpcError as e:
            return e


def test_a_standby_names_a_live_leader_at_once(etcd_fleet) -> None:
    etcd_fleet.start(2, lease_ttl=2.0)
    leader = etcd_fleet.leader()
    standby = next(p for p in etcd_fleet.started if p is not leader)
    began = time.monotonic()
    answer = watch(standby.address, timeout=10)
    assert isinstance(answer, grpc.RpcError) and answer.code() == grpc.StatusCode.UNAVAILABLE
    hints = [m.value for m in answer.trailing_metadata() or () if m.key == LEADER_METADATA_KEY]
    assert hints == [leader.address]
    assert time.monotonic() - began < 5, "held although its leader takes connections"


def test_a_standby_holds_a_watch_until_it_leads_after_the_leader_died(etcd_fleet) -> None:
    etcd_fleet.start(2, lease_ttl=2.0)
    leader = etcd_fleet.leader()
    standby = next(p for p in etcd_fleet.started if p is not leader)
    leader.kill()
    assert not standby.is_leader()  # the dead leader's lease runs for 2 s more
    answer = watch(standby.address, timeout=20)
    # Refused before (UNAVAILABLE naming the dead leader); now held, then served.
    assert isinstance(answer, watch_pb2.WatchResponse), answer
    assert answer.snapshot.key == "routes"
    assert standby.is_leader()
