"""What the gateway knows about each Kafka API: names, header versions, where throttle_time_ms is.

Everything here comes from the message schemas of the `kio` library (Apache Kafka's JSON message
definitions, generated into Python), looked up once per (api key, version) and cached. An API or
version that kio does not know is still proxied: it is passed through as bytes, charged to
`request_percentage` and muted when throttled, only its response field is left alone.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.index import api_key_map

PRODUCE, FETCH, METADATA, FIND_COORDINATOR = 0, 1, 3, 10
SASL_HANDSHAKE, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 17, 18, 19, 20
SASL_AUTHENTICATE, CREATE_PARTITIONS, DESCRIBE_CLUSTER = 36, 37, 60
DESCRIBE_QUORUM, SHARE_FETCH, SHARE_ACKNOWLEDGE = 55, 78, 79

#: APIs whose responses hand out broker addresses the gateway does not rewrite: not advertised
#: to clients (they are for controllers, or for share groups the gateway does not proxy yet).
HIDDEN_APIS: frozenset[int] = frozenset({DESCRIBE_QUORUM, SHARE_FETCH, SHARE_ACKNOWLEDGE})

#: The APIs the gateway decodes or rewrites, with the versions it can handle (kio's schemas;
#: SaslHandshake v0 is left out: after it, raw SASL tokens follow that are not Kafka frames).
DECODED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 13), FETCH: (4, 18), METADATA: (0, 13), FIND_COORDINATOR: (0, 6),
    SASL_HANDSHAKE: (1, 1), API_VERSIONS: (0, 4), CREATE_TOPICS: (2, 7), DELETE_TOPICS: (1, 6),
    SASL_AUTHENTICATE: (0, 2), CREATE_PARTITIONS: (0, 3), DESCRIBE_CLUSTER: (0, 2),
}

#: Requests handled by a broker's authenticator, not by KafkaApis: never charged or throttled.
UNCHARGED: frozenset[int] = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})

#: Mutation APIs and the first version whose quota is strict (KIP-599), by contract name.
MUTATION_APIS: dict[int, str] = {CREATE_TOPICS: "CreateTopics", DELETE_TOPICS: "DeleteTopics",
                                 CREATE_PARTITIONS: "CreatePartitions"}


@functools.cache
def api_name(api_key: int) -> str:
    """Kafka's name of an API (`Produce`, `CreateTopics`), `Api<key>` for an unknown key."""
    snake = api_key_map.get(api_key)
    if snake is None:
        return f"Api{api_key}"
    return "".join(part.capitalize() for part in snake.split("_"))


@functools.cache
def request_schema(api_key: int, version: int) -> Any:
    """kio's request class, or None when kio does not know this API version."""
    try:
        return load_request_schema(api_key, version)
    except (KioIndexError, KeyError):
        return None


@functools.cache
def response_schema(api_key: int, version: int) -> Any:
    """kio's response class, or None when kio does not know this API version."""
    try:
        return load_response_schema(api_key, version)
    except (KioIndexError, KeyError):
        return None


@functools.cache
def flexible_request_header(api_key: int, version: int) -> bool | None:
    """True for request header v2 (tagged fields), False for v1, None if unknown."""
    schema = request_schema(api_key, version)
    if schema is None:
        return None
    return bool(schema.__header_schema__.__module__.endswith(".v2.header"))


@functools.cache
def flexible_response_header(api_key: int, version: int) -> bool | None:
    """True for response header v1 (tagged fields), False for v0 (always for ApiVersions)."""
    schema = response_schema(api_key, version)
    if schema is None:
        return None
    return bool(schema.__header_schema__.__module__.endswith(".v1.header"))


@functools.cache
def throttle_first(api_key: int, version: int) -> bool:
    """True when the response body starts with throttle_time_ms (most APIs since KIP-219's era):
    the gateway then sets it in place, four bytes after the header, without decoding."""
    schema = response_schema(api_key, version)
    if schema is None:
        return False
    fields = dataclasses.fields(schema)
    return bool(fields) and fields[0].name == "throttle_time"
