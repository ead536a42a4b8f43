"""The chaos suite's parts (bench/chaos.py runs them; bench/soak.py shares
the cluster and the traffic):

- history.py   what a run records: control operations, requests, faults,
               leader actions, the final state; saved as JSON, checked again
               with `bench/chaos.py --check FILE`;
- checks.py    the invariants, pure functions of a history (unit-tested on
               recorded and on broken histories: tests/test_chaos_checks.py);
- schedule.py  the nemesis's plan, a pure function of the seed;
- and the live parts: the cluster, the traffic, the control loop, the faults.
"""
