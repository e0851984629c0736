"""What the gateway knows about each Kafka API: names, header versions, where throttle_time_ms is.

Everything here comes from the message schemas of the `kio` library (Apache Kafka's JSON message
definitions, generated into Python), looked up once per (api key, version) kio knows and cached:
the keys and versions a client makes up are answered without growing a cache. An API or version
that kio does not know is still proxied: it is passed through as bytes, charged (its size as
request bytes for Produce, its service time always) and muted when throttled; only its response
field is left alone.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map

PRODUCE, FETCH, METADATA, FIND_COORDINATOR = 0, 1, 3, 10
SASL_HANDSHAKE, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 17, 18, 19, 20
DESCRIBE_CONFIGS, SASL_AUTHENTICATE, CREATE_PARTITIONS, DESCRIBE_CLUSTER = 32, 36, 37, 60
DESCRIBE_QUORUM, SHARE_FETCH, SHARE_ACKNOWLEDGE = 55, 78, 79
DESCRIBE_ACLS, DELETE_ACLS, STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE = 29, 31, 88, 89
#: The KRaft quorum's APIs whose answers name controllers' endpoints.
RAFT_APIS: frozenset[int] = frozenset({52, 53, 54, 59, 82})  # Vote, Begin/EndQuorumEpoch,
# FetchSnapshot, UpdateRaftVoter

#: APIs whose responses hand out broker addresses the gateway does not rewrite: not advertised
#: to clients, and refused if a client sends them anyway (they are for controllers, or for share
#: groups the gateway does not proxy yet).
HIDDEN_APIS: frozenset[int] = frozenset({DESCRIBE_QUORUM, SHARE_FETCH, SHARE_ACKNOWLEDGE}
                                        | RAFT_APIS)

#: APIs whose responses have host or port fields that are not brokers': an ACL's host pattern, a
#: Kafka Streams instance's own endpoint (`application.server`). Every other API whose response
#: has one is rewritten (`ADDRESSES`) or hidden (a unit test walks kio's schemas for them).
NOT_BROKER_HOSTS: frozenset[int] = frozenset({DESCRIBE_ACLS, DELETE_ACLS, STREAMS_GROUP_HEARTBEAT,
                                              STREAMS_GROUP_DESCRIBE})

#: The APIs the gateway decodes or rewrites, with the versions it offers clients (kio's schemas,
#: and the old mutation versions read with a newer one's: `messages.OLD_MUTATIONS`). SaslHandshake
#: v0 is left out: the gateway follows its raw tokens only for the mechanisms it can read, and
#: every client that speaks v1 uses it when offered.
DECODED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 13), FETCH: (4, 18), METADATA: (0, 13), FIND_COORDINATOR: (0, 6),
    SASL_HANDSHAKE: (1, 1), API_VERSIONS: (0, 4), CREATE_TOPICS: (0, 7), DELETE_TOPICS: (0, 6),
    SASL_AUTHENTICATE: (0, 2), CREATE_PARTITIONS: (0, 3), DESCRIBE_CLUSTER: (0, 2),
    DESCRIBE_CONFIGS: (1, 4),
}

#: APIs whose answers carry broker addresses, with the versions whose answers the gateway can
#: rewrite (Produce below v10 and Fetch below v16 carry none). A request of another version, or
#: of a hidden API, is refused: its answer would send the client around the gateway.
ADDRESSES: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 13), FETCH: (0, 18), METADATA: (0, 13), FIND_COORDINATOR: (0, 6),
    DESCRIBE_CLUSTER: (0, 2), DESCRIBE_CONFIGS: (1, 4),  # a broker's listener configs
}


def rewritable(api_key: int, version: int) -> bool:
    """Whether the answer to this request can reach the client with every address rewritten."""
    if api_key in HIDDEN_APIS:
        return False
    window = ADDRESSES.get(api_key)
    return window is None or window[0] <= version <= window[1]


#: SASL requests: on a SASL listener a broker's authenticator serves them, not KafkaApis, so
#: they are neither charged nor throttled there (on other listeners KafkaApis answers them).
SASL_APIS: frozenset[int] = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})
#: What a broker's authenticator serves before a client has authenticated.
AUTHENTICATOR_APIS: frozenset[int] = SASL_APIS | {API_VERSIONS}

#: Mutation APIs and the first version whose quota is strict (KIP-599), by contract name.
MUTATION_APIS: dict[int, str] = {CREATE_TOPICS: "CreateTopics", DELETE_TOPICS: "DeleteTopics",
                                 CREATE_PARTITIONS: "CreatePartitions"}


#: Versions beyond this are not looked up at all (Kafka's highest is below 20).
MAX_VERSION = 64


@functools.cache
def _name(api_key: int) -> str:
    return "".join(part.capitalize() for part in api_key_map[api_key].split("_"))


def api_name(api_key: int) -> str:
    """Kafka's name of an API (`Produce`, `CreateTopics`), `Api<key>` for an unknown key."""
    return _name(api_key) if api_key in api_key_map else f"Api{api_key}"


def metric_label(api_key: int) -> str:
    """The `api` label of a metric: Kafka's name, or `unknown` for every key kio does not know
    (a client picks the key, and labels must not grow with what clients make up)."""
    return _name(api_key) if api_key in api_key_map else "unknown"


@functools.cache
def _versions(api_key: int) -> range:
    """The versions kio has schemas for (contiguous in every kio release)."""
    versions = schema_name_map[api_key_map[api_key]]
    return range(min(versions), max(versions) + 1)


def _schema_known(api_key: int, version: int) -> bool:
    return api_key in api_key_map and version in _versions(api_key)


@functools.cache
def _request_schema(api_key: int, version: int) -> Any:
    try:
        return load_request_schema(api_key, version)
    except (KioIndexError, KeyError):
        return None


@functools.cache
def _response_schema(api_key: int, version: int) -> Any:
    try:
        return load_response_schema(api_key, version)
    except (KioIndexError, KeyError):
        return None


def request_schema(api_key: int, version: int) -> Any:
    """kio's request class, or None when kio does not know this API version."""
    return _request_schema(api_key, version) if _schema_known(api_key, version) else None


def response_schema(api_key: int, version: int) -> Any:
    """kio's response class, or None when kio does not know this API version."""
    return _response_schema(api_key, version) if _schema_known(api_key, version) else None


def _flexible(schema: Any, module_suffix: str) -> bool:
    return bool(schema.__header_schema__.__module__.endswith(module_suffix))


def _header_version(api_key: int, version: int, load: Any, suffix: str) -> bool | None:
    """Whether a message version has the flexible header: from its schema, or for a version
    outside kio's range from the nearest one kio knows, since Kafka's flexible versions are
    always "N+": below a version with the old header, the old header; above one with the
    flexible header, the flexible one. None when that does not tell."""
    if api_key not in api_key_map:
        return None
    versions = _versions(api_key)
    if version in versions:
        schema = load(api_key, version)
        return None if schema is None else _flexible(schema, suffix)
    if version < versions.start:
        lowest = load(api_key, versions.start)
        return False if lowest is not None and not _flexible(lowest, suffix) else None
    highest = load(api_key, versions.stop - 1)
    return True if highest is not None and _flexible(highest, suffix) else None


@functools.cache
def _flexible_request(api_key: int, version: int) -> bool | None:
    return _header_version(api_key, version, _request_schema, ".v2.header")


@functools.cache
def _flexible_response(api_key: int, version: int) -> bool | None:
    return _header_version(api_key, version, _response_schema, ".v1.header")


def flexible_request_header(api_key: int, version: int) -> bool | None:
    """True for request header v2 (tagged fields), False for v1, None if unknown."""
    if api_key not in api_key_map or not 0 <= version <= MAX_VERSION:
        return None
    return _flexible_request(api_key, version)


def flexible_response_header(api_key: int, version: int) -> bool | None:
    """True for response header v1 (tagged fields), False for v0 (always for ApiVersions)."""
    if api_key not in api_key_map or not 0 <= version <= MAX_VERSION:
        return None
    return _flexible_response(api_key, version)


@functools.cache
def _throttle_first(api_key: int, version: int) -> bool:
    schema = _response_schema(api_key, version)
    if schema is None:
        return False
    fields = dataclasses.fields(schema)
    return bool(fields) and fields[0].name == "throttle_time"


def throttle_first(api_key: int, version: int) -> bool:
    """True when the response body starts with throttle_time_ms (most APIs since KIP-219's era):
    the gateway then sets it in place, four bytes after the header, without decoding."""
    return _schema_known(api_key, version) and _throttle_first(api_key, version)
