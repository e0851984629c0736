"""One CreateTopics / DeleteTopics / CreatePartitions request on its way through the gateway:
what each topic costs, which topics are refused, what is charged once the broker has answered.

The controller mutation quota (KIP-599) charges partitions: CreateTopics the partitions created,
DeleteTopics the partitions of the topic deleted, CreatePartitions the increment. The last two
are not in the request, so the gateway first asks the broker, on the client's own connection
(same principal, same ACLs), for the topics' current partition counts; the broker answers that
lookup before the request itself, and the client never sees it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from app.enforcement.mutations import MutationPlan
from app.gateway import apis, messages

#: A CreateTopics topic asking for the broker's default partition count is charged this many
#: partitions locally (Kafka's default num.partitions); its event carries the real count from
#: the response (CreateTopics v5+).
DEFAULT_PARTITIONS = 1


@dataclass
class MutationContext:
    api_key: int
    version: int
    request: messages.MutationRequest
    payload: bytes  # the request as the client sent it
    body: int  # where its body starts
    by_name: dict[str, int] = field(default_factory=dict)  # partitions now, from the lookup
    by_id: dict[uuid.UUID, int] = field(default_factory=dict)
    plan: MutationPlan | None = None
    throttle_until: int = 0  # epoch ms: the controller throttle of the admitted topics

    @property
    def needs_lookup(self) -> bool:
        return self.api_key in (apis.DELETE_TOPICS, apis.CREATE_PARTITIONS) and bool(self.request.topics)

    def learn(self, payload: bytes, version: int) -> None:
        """The partition counts a lookup's Metadata answer gives."""
        self.by_name, self.by_id = messages.topic_partition_counts(payload, version)

    def current(self, topic: messages.MutationTopic) -> int | None:
        if topic.name:
            return self.by_name.get(topic.name)
        return self.by_id.get(topic.topic_id) if topic.topic_id else None

    def charged(self) -> list[int]:
        """Partitions each topic costs, in request order (0 when unknown: nothing to charge)."""
        out = []
        for topic in self.request.topics:
            if self.api_key == apis.CREATE_TOPICS:
                out.append(topic.partitions if topic.partitions > 0 else DEFAULT_PARTITIONS)
            elif self.api_key == apis.DELETE_TOPICS:
                out.append(self.current(topic) or 0)
            else:
                now = self.current(topic)
                out.append(max(0, topic.partitions - now) if now is not None else 0)
        return out

    def admitted(self) -> list[int]:
        """Indexes of the topics forwarded to the broker."""
        rejected = self.plan.rejected if self.plan else frozenset()
        return [i for i in range(len(self.request.topics)) if i not in rejected]

    def forwarded_payload(self) -> bytes:
        """The request the broker gets: as sent, or without its rejected topics."""
        admitted = self.admitted()
        if len(admitted) == len(self.request.topics):
            return self.payload
        return messages.keep_topics(self.api_key, self.version, self.payload, self.body, admitted)

    def admitted_partitions(self, response: bytes) -> list[int]:
        """Partitions of each topic the broker admitted, for the usage events."""
        results = messages.mutation_results(self.api_key, self.version, response)
        costs = self.charged()
        by_name = {t.name: i for i, t in enumerate(self.request.topics) if t.name}
        by_id = {t.topic_id: i for i, t in enumerate(self.request.topics) if t.topic_id}
        out = []
        for result in results:
            if result.error_code != 0:
                continue
            index = by_name.get(result.name) if result.name else \
                by_id.get(result.topic_id) if result.topic_id else None
            if self.api_key == apis.CREATE_TOPICS and result.partitions > 0:
                out.append(result.partitions)
            elif index is not None:
                out.append(costs[index])
        return out
