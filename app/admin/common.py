"""What every Kafka-facing tool needs: the bootstrap address and one-line errors."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

from app.errors import UserError
from app.settings import Settings, load

T = TypeVar("T")

NO_BOOTSTRAP = ("KAFKA_BOOTSTRAP_SERVERS is not set: set it to your Kafka cluster (host:port), "
                "or run `quota-streams broker` and export the address it prints")


def settings_with_bootstrap() -> tuple[Settings, str]:
    """The settings and the bootstrap address, or a `UserError` saying how to set it."""
    settings = load()
    bootstrap = settings.kafka_bootstrap_servers
    if not bootstrap:
        raise UserError(NO_BOOTSTRAP)
    return settings, bootstrap


def run_kafka(bootstrap: str, coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that talks to Kafka; anything Kafka-shaped becomes one `UserError` line."""
    from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, NodeNotReadyError

    from app.kafka.topics import BrokerError
    from app.kafka.clients import TopicMissing, quiet_client_logs
    from app.kafka.offsets import EndOffsetError

    quiet_client_logs()
    unreachable = (f"cannot reach Kafka at {bootstrap}", "check KAFKA_BOOTSTRAP_SERVERS "
                   "(or run `quota-streams broker` and export the address it prints)")
    try:
        return asyncio.run(coro)
    except (UserError, BrokenPipeError):
        raise
    except TopicMissing as exc:
        raise UserError(f"topic {exc.topic!r} does not exist on {bootstrap}; start a worker "
                        "(it creates the topics) or run `quota-streams broker --create-topics`") from None
    except (KafkaConnectionError, NodeNotReadyError, KafkaTimeoutError) as exc:
        raise UserError(f"{unreachable[0]} ({type(exc).__name__}); {unreachable[1]}") from None
    except (BrokerError, EndOffsetError) as exc:
        raise UserError(_one_line(str(exc))) from None
    except KafkaError as exc:
        raise UserError(f"Kafka at {bootstrap} answered with an error: "
                        f"{type(exc).__name__}: {_one_line(str(exc))}") from None
    except (OSError, TimeoutError) as exc:
        detail = str(exc) or type(exc).__name__
        raise UserError(f"{unreachable[0]} ({_one_line(detail)}); {unreachable[1]}") from None


def emit(text: str) -> None:
    """Print to stdout; a reader that went away (`| head`) is not an error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _one_line(text: str) -> str:
    return " ".join(text.split())
