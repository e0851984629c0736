"""Which gateway port stands for which broker: the port rule, and the brokers' real addresses.

Rule ("port identifies node", as Kroxylicious' port-per-broker scheme): clients bootstrap on the
listen port; broker `n` is reached at `node_port_base + (n - first_node_id)`. By default
`node_port_base` is the listen port + 1 and `first_node_id` the lowest node id of the first answer
that names brokers (the start-up probe's, or, in front of a SASL listener, the first the gateway
reads after a client authenticated), so a cluster of brokers 1, 2, 3 behind `--listen :9192` is
reached at 9193, 9194, 9195. Until then no broker has a port. At most `max_nodes` ports are used;
a broker whose id falls outside the range cannot be reached through the gateway: it is left out
of every answer (a client is never handed its own address), logged, counted
(`quota_streams_gateway_unfronted_brokers`) and reported by `/ready`. Give both explicitly when
several gateway instances must agree whatever brokers are up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from app.gateway.messages import Node

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PortRule:
    advertised_host: str
    node_port_base: int
    first_node_id: int | None  # None: not known yet (no broker has a port)
    max_nodes: int = 64

    def port(self, node_id: int) -> int | None:
        if self.first_node_id is None:
            return None
        index = node_id - self.first_node_id
        if not 0 <= index < self.max_nodes:
            return None
        port = self.node_port_base + index
        return port if port < 65536 else None


class NodeMap:
    """The brokers the gateway has seen (from its start-up probe and every Metadata or
    DescribeCluster response it proxied), where each really is and where clients reach it."""

    def __init__(self, rule: PortRule) -> None:
        self.rule = rule
        self._upstream: dict[int, tuple[str, int]] = {}
        self._unmapped: set[int] = set()

    def learn(self, nodes: list[Node]) -> list[int]:
        """Record the brokers' real addresses; returns the node ids that are new or moved. The
        first brokers learned fix the rule's first node id if nothing else did (their lowest)."""
        if self.rule.first_node_id is None and nodes:
            self.rule = replace(self.rule, first_node_id=min(n.node_id for n in nodes))
            logger.info("first node id %d (the lowest the cluster named first): broker n is at "
                        "port %d + (n - %d)", self.rule.first_node_id, self.rule.node_port_base,
                        self.rule.first_node_id)
        changed = []
        for node in nodes:
            address = (node.host, node.port)
            if self._upstream.get(node.node_id) != address:
                self._upstream[node.node_id] = address
                changed.append(node.node_id)
                if self.rule.port(node.node_id) is None and node.node_id not in self._unmapped:
                    self._unmapped.add(node.node_id)
                    logger.error("Broker %d is outside the gateway's node ports (first node id %d, "
                                 "%d ports from %d): it is left out of every answer, so clients "
                                 "cannot use it; give --first-node-id and --max-nodes to cover "
                                 "it", node.node_id, self.rule.first_node_id, self.rule.max_nodes,
                                 self.rule.node_port_base)
        return changed

    def upstream(self, node_id: int) -> tuple[str, int] | None:
        """The broker's own address, as the cluster advertises it."""
        return self._upstream.get(node_id)

    def client_address(self, node_id: int) -> tuple[str, int] | None:
        """Where a client reaches the broker through this gateway (None: not through it)."""
        port = self.rule.port(node_id)
        return None if port is None else (self.rule.advertised_host, port)

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._upstream)

    @property
    def unfronted(self) -> int:
        """Brokers the cluster named that have no port on this gateway."""
        return sum(1 for node_id in self._upstream if self.rule.port(node_id) is None)
