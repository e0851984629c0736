"""A connection's SASL state as the gateway follows it, without sockets: which requests a broker
would serve, how large a frame may be, when an exchange ends and whom it names."""

from __future__ import annotations

import pytest

from app.gateway import apis
from app.gateway.authentication import (
    ACCEPTED,
    CONTINUE,
    DELEGATION_TOKEN,
    REFUSED,
    UNFOLLOWABLE,
    Authentication,
)
from app.gateway.limits import PRE_AUTH_FRAME
from app.usage.names import charged_name

MAX = 100 << 20


def test_a_sasl_listener_serves_only_the_authenticator_until_an_exchange_is_accepted() -> None:
    auth = Authentication(sasl_listener=True)
    assert [auth.allows(k) for k in (apis.API_VERSIONS, apis.SASL_HANDSHAKE, apis.PRODUCE)] == [
        True, True, False]
    assert auth.frame_limit(MAX) == PRE_AUTH_FRAME
    # the authenticator answers ApiVersions and SASL before authentication, not KafkaApis
    assert not auth.charged(apis.SASL_AUTHENTICATE) and not auth.charged(apis.API_VERSIONS)
    auth.handshake(1, "PLAIN")
    assert auth.handshake_answered(True) == CONTINUE and not auth.raw
    assert auth.client_token(b"\x00alice\x00pw") == CONTINUE
    assert auth.server_token(b"") == ACCEPTED
    assert auth.allows(apis.PRODUCE) and auth.frame_limit(MAX) == MAX and auth.user == "alice"
    assert auth.charged(apis.API_VERSIONS) and auth.charged(apis.PRODUCE)
    assert not auth.charged(apis.SASL_AUTHENTICATE)  # a re-authentication: the authenticator's


@pytest.mark.parametrize("token, refused", [
    (b"n,,n=tok1,r=abc,tokenauth=true", True),
    (b"n,,n=tok1,r=abc,tokenauth=TRUE", True),  # Boolean.parseBoolean ignores case
    (b"n,a=tok1,n=tok1,r=abc,other=1,tokenauth=true", True),
    (b"n,,n=tok1,r=abc,tokenauth=false", False),
    (b"n,,n=tokenauth=3Dtrue,r=abc", False),  # a user name, not an extension
    (b"n,,n=alice,r=abc", False),
])
def test_a_scram_exchange_for_a_delegation_token_is_refused_before_the_broker(
        token: bytes, refused: bool) -> None:
    auth = Authentication(sasl_listener=True)
    auth.handshake(1, "SCRAM-SHA-256")
    auth.handshake_answered(True)
    assert auth.client_token(token) == (DELEGATION_TOKEN if refused else CONTINUE)
    assert not auth.authenticated and auth.user == "ANONYMOUS"


def test_plain_has_no_delegation_tokens() -> None:
    auth = Authentication(sasl_listener=True)
    auth.handshake(1, "PLAIN")
    auth.handshake_answered(True)
    assert auth.client_token(b"\x00n,,n=x,r=y,tokenauth=true\x00pw") == CONTINUE


def test_a_user_name_longer_than_the_workers_take_is_charged_under_its_bounded_form() -> None:
    long_user = "u" * 5000
    auth = Authentication(sasl_listener=True)
    auth.handshake(1, "PLAIN")
    auth.handshake_answered(True)
    auth.client_token(b"\x00" + long_user.encode() + b"\x00pw")
    assert auth.server_token(b"") == ACCEPTED
    assert auth.user == charged_name(long_user) and len(auth.user) == 1024


def test_elsewhere_everything_is_served_and_sasl_requests_are_charged() -> None:
    auth = Authentication(sasl_listener=False)
    assert auth.allows(apis.PRODUCE) and auth.charged(apis.SASL_HANDSHAKE)
    assert auth.frame_limit(MAX) == MAX


@pytest.mark.parametrize("mechanism, tokens, user", [
    ("PLAIN", [(b"\x00alice\x00pw", b"")], "alice"),
    ("SCRAM-SHA-512", [(b"n,,n=bob,r=x", b"r=xy,s=c2FsdA==,i=4096"),
                       (b"c=biws,r=xy,p=cA==", b"v=c2ln")], "bob"),
    ("OAUTHBEARER", [(b"n,,\x01auth=Bearer e30.eyJzdWIiOiJjYXJvbCJ9.\x01\x01", b"")], "carol"),
])
def test_raw_tokens_follow_an_accepted_v0_handshake_for_the_mechanisms_round_trips(
        mechanism: str, tokens: list[tuple[bytes, bytes]], user: str) -> None:
    auth = Authentication(sasl_listener=True)
    auth.handshake(0, mechanism)
    assert not auth.raw  # not before the broker accepted the handshake
    assert auth.handshake_answered(True) == CONTINUE and auth.raw
    assert auth.frame_limit(MAX) == PRE_AUTH_FRAME
    steps = []
    for client, server in tokens:
        auth.client_token(client)
        steps.append(auth.server_token(server))
    assert steps == [CONTINUE] * (len(tokens) - 1) + [ACCEPTED]
    assert not auth.raw and auth.authenticated and auth.user == user


def test_a_refused_handshake_starts_no_raw_exchange() -> None:
    auth = Authentication(sasl_listener=False)
    auth.handshake(0, "PLAIN")
    assert auth.handshake_answered(False) == REFUSED and not auth.raw


def test_raw_tokens_it_cannot_count_are_unfollowable() -> None:
    auth = Authentication(sasl_listener=True)
    auth.handshake(0, "GSSAPI")
    assert auth.handshake_answered(True) == UNFOLLOWABLE


def test_a_scram_server_final_without_its_signature_is_a_refusal() -> None:
    auth = Authentication(sasl_listener=True)
    auth.handshake(0, "SCRAM-SHA-256")
    auth.handshake_answered(True)
    auth.client_token(b"n,,n=bob,r=x")
    assert auth.server_token(b"r=xy,s=c2FsdA==,i=4096") == CONTINUE
    auth.client_token(b"c=biws,r=xy,p=cA==")
    assert auth.server_token(b"e=invalid-proof") == REFUSED
    assert not auth.authenticated and auth.user == "ANONYMOUS"


def test_gssapi_in_kafka_framing_counts_as_authenticated_anonymously() -> None:
    auth = Authentication(sasl_listener=True)
    auth.handshake(1, "GSSAPI")
    auth.handshake_answered(True)
    auth.client_token(b"\x60kerberos")
    assert auth.server_token(b"\x60reply") == CONTINUE
    assert auth.authenticated and auth.user == "ANONYMOUS"


def _exchange(auth: Authentication, name: str, accepted: bool) -> None:
    auth.handshake(1, "PLAIN")
    auth.handshake_answered(True)
    auth.client_token(b"\x00" + name.encode() + b"\x00pw")
    auth.server_token(b"", error=not accepted)


def test_a_reauthentication_keeps_the_principal_until_the_broker_accepts_it() -> None:
    auth = Authentication(sasl_listener=True)
    _exchange(auth, "alice", accepted=True)
    _exchange(auth, "mallory", accepted=False)
    assert auth.authenticated and auth.user == "alice"
