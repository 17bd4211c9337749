"""The local Redis Cluster the cluster tests and the chaos simulation start: its ports, and a
start that meets a port taken by another process."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from simulations.crash import local_redis
from simulations.crash.local_redis import HOST, LocalCluster, free_ports


def test_ports_are_chosen_under_the_ephemeral_range() -> None:
    low = local_redis._ephemeral_low()
    for port in free_ports(6, with_bus=True):
        assert port + 10_000 < low
    assert all(port < low for port in free_ports(6))


def test_a_cluster_whose_port_was_taken_starts_again_on_new_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process binds a chosen port before its node does: the node exits, and the
    cluster is started once more on ports chosen again."""
    chooser = local_redis.free_ports
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind((HOST, 0))
    taken.listen()
    calls: list[list[int]] = []

    def first_with_a_taken_port(count: int, *, with_bus: bool = False) -> list[int]:
        ports = chooser(count, with_bus=with_bus)
        if not calls:
            ports[-1] = taken.getsockname()[1]
        calls.append(ports)
        return ports

    monkeypatch.setattr(local_redis, "free_ports", first_with_a_taken_port)
    caplog.set_level(logging.WARNING, logger="simulations.crash.local_redis")
    try:
        cluster = LocalCluster(tmp_path).start()
    finally:
        taken.close()
    try:
        assert len(calls) == 2
        assert [node.port for node in cluster.nodes] == calls[1]
        assert len(cluster.master_ports()) == 3
        assert "trying again on new ports" in caplog.text
    finally:
        cluster.kill()
