"""The ports the suite's servers are given: none the kernel can hand to another socket
in the meantime (a JVM's py4j gateway binds port 0), none two processes of the suite share."""

from __future__ import annotations

import subprocess
import sys

from backfill_assets_dev.stack import servers

CLAIMS_IN_A_PROCESS = """
import sys
from backfill_assets_dev.stack import servers
print(sum(servers._claim(int(port)) is None for port in sys.argv[1:]))
"""


def test_a_servers_port_is_outside_the_ephemeral_range_and_held_until_stopped():
    low, high = servers._ephemeral_range()
    processes = servers.Processes()
    try:
        ports = [processes.free_port() for _ in range(20)]
        assert len(set(ports)) == 20
        assert not any(low <= port <= high for port in ports)
        taken = subprocess.run(
            [sys.executable, "-c", CLAIMS_IN_A_PROCESS, *map(str, ports)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert int(taken) == 20  # another process of the suite cannot claim one of them
        assert servers._claim(ports[0]) is None
    finally:
        processes.stop_all()
    claim = servers._claim(ports[0])  # released by stop_all
    assert claim is not None
    claim.close()
