"""The dev stack's loopback ports: every listener of every node its own, even from a kernel
that hands a port just released to the next bind."""

from __future__ import annotations

from typing import Any

import pytest

from app.devstack import kafka
from app.devstack.kafka import distinct_free_ports


class ReusingSocket:
    """A socket whose `bind(("127.0.0.1", 0))` takes the lowest port no open socket holds, as
    a kernel may: a port is handed out again as soon as its socket closes."""

    bound: set[int] = set()

    def __init__(self, *args: Any) -> None:
        self.port = 0

    def __enter__(self) -> ReusingSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bind(self, address: tuple[str, int]) -> None:
        self.port = min(p for p in range(40000, 40100) if p not in ReusingSocket.bound)
        ReusingSocket.bound.add(self.port)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        ReusingSocket.bound.discard(self.port)


def test_ports_taken_together_differ_though_the_kernel_reuses_released_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka.socket, "socket", ReusingSocket)
    ports = distinct_free_ports(18)  # three nodes, six listeners each
    assert len(set(ports)) == 18
    assert not ReusingSocket.bound  # all released again


def test_real_ports_for_a_three_node_cluster_differ() -> None:
    for _ in range(200):
        ports = distinct_free_ports(18)
        assert len(set(ports)) == 18
