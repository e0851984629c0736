"""A config older than the newest one of its compaction key is refused (`stale_config`), and
counted by every reader that follows the config topic."""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client import generate_latest

from app.contract.keys import config_key
from app.engine.configs import parse_config_record
from app.engine.engine import EngineSettings
from app.engine.timeline import ConfigTimeline
from app.gateway.config import GatewayConfig
from app.gateway.server import Gateway
from app.intake.newest_configs import NewestConfigs, identity
from app.kafka.config_follower import ConfigFollower, refused_label
from app.kafka.security import PLAINTEXT
from app.signing import Signing


def config(ts: int, entity: dict[str, Any], **quotas: Any) -> dict[str, Any]:
    return {"type": "quota_config", "v": 1, "ts": ts, "entity": entity, "quotas": quotas}


def update(ts: int, entity: dict[str, Any], **quotas: Any) -> Any:
    return parse_config_record(config(ts, entity, **quotas))


def test_an_older_config_of_the_same_key_is_refused_an_equal_or_other_one_is_not() -> None:
    newest = NewestConfigs()
    assert newest.offer(update(200, {"user": "alice"}, producer_byte_rate=10)) is None
    refused = newest.offer(update(100, {"user": "alice"}, producer_byte_rate=99))
    assert refused is not None and refused.startswith("stale_config: ts 100 is older than 200")
    assert newest.offer(update(200, {"user": "alice"}, producer_byte_rate=10)) is None
    # other quota keys, another entity: other compaction keys
    assert newest.offer(update(100, {"user": "alice"}, producer_byte_rate=1,
                                     consumer_byte_rate=2)) is None
    assert newest.offer(update(100, {"user": "bob"}, producer_byte_rate=1)) is None
    assert newest.offer(update(300, {"user": "alice"}, producer_byte_rate=None)) is None
    assert newest.offer(update(250, {"user": "alice"}, producer_byte_rate=5)) is not None


def test_the_key_is_the_compaction_key() -> None:
    """Two configs share an identity exactly when their records share a key."""
    updates = [update(0, {"user": "alice"}, producer_byte_rate=1),
               update(0, {"user": "alice"}, producer_byte_rate=2),
               update(0, {"user": "alice"}, producer_byte_rate=1, consumer_byte_rate=1),
               update(0, {"user": "alice", "client_id": "app"}, producer_byte_rate=1),
               update(0, {"ip": "::1"}, connection_creation_rate=1),
               update(0, {"ip": "0:0::1"}, connection_creation_rate=2),
               update(0, {"broker": "<default>"}, max_connection_creation_rate=1),
               update(0, {"broker": "<default>", "listener": "L"},
                      max_connection_creation_rate=1)]
    for a in updates:
        for b in updates:
            assert (identity(a) == identity(b)) == (config_key(a) == config_key(b))


def test_the_follower_counts_refusals_by_a_bounded_label() -> None:
    follower = ConfigFollower("", "cfg", ConfigTimeline(), signing=Signing())
    follower.apply(orjson.dumps(config(200, {"user": "a"}, producer_byte_rate=10)))
    follower.apply(orjson.dumps(config(100, {"user": "a"}, producer_byte_rate=10**12)))
    follower.apply(b"{")
    follower.apply(orjson.dumps(config(50, {"user": "a"}, producer_byte_rate=10**12)))
    assert follower.applied == 1 and follower.bad == 3
    assert dict(follower.refused) == {"stale_config": 2, "invalid": 1}
    assert follower.timeline.latest.entries() == [("client", {"user": "a"},
                                                    "producer_byte_rate", 10)]
    assert refused_label("bad_signature") == "bad_signature"
    assert refused_label("not JSON: unexpected character") == "invalid"


def test_the_gateway_counts_the_configs_its_follower_refuses() -> None:
    gateway_config = GatewayConfig(upstream=(("b1", 9092),), listen=("127.0.0.1", 9192),
                                   advertised_host="gw", kafka_bootstrap="", topics={},
                                   kafka_security=PLAINTEXT, signing=Signing(),
                                   directives_topic="", local=EngineSettings())
    gateway = Gateway(gateway_config, directives=object())  # type: ignore[arg-type]
    follower = gateway.config_follower()
    follower.apply(orjson.dumps(config(200, {"user": "a"}, producer_byte_rate=10)))
    follower.apply(orjson.dumps(config(100, {"user": "a"}, producer_byte_rate=10**12)))
    assert b'quota_streams_gateway_configs_refused_total{reason="stale_config"} 1.0' in \
        generate_latest(gateway.metrics.registry)
