"""Where one connection stands in SASL authentication, followed as the exchange passes through.

The gateway never authenticates anyone: the broker decides. The gateway follows the exchange to
know three things: the principal to charge (the name the client claims, once the broker has
accepted it), which of the client's bytes are Kafka frames, and whether the connection is
authenticated yet (a broker holds an unauthenticated connection to tighter limits).

Kafka's authenticator (SaslServerAuthenticator), as followed here:

- SaslHandshake v1: the tokens travel in SaslAuthenticate requests, in Kafka framing; an answer
  with an error ends the exchange (and a broker then closes the connection).
- SaslHandshake v0: raw tokens follow if, and only if, the broker's answer has no error. A raw
  token is a size-prefixed blob outside Kafka framing: the client's, then the server's, for as
  many round trips as the mechanism takes; then Kafka framing resumes. A broker without SASL on
  the listener answers the handshake with an error, and the connection stays in Kafka framing.
- The exchange ends after the mechanism's round trips (`MECHANISMS`): PLAIN and OAUTHBEARER take
  one, accepted when the server's token is empty; SCRAM-SHA-256/512 take two, accepted when the
  server-final message is `v=<signature>`. A broker closes the connection when it refuses one.
- A SCRAM exchange that authenticates a delegation token (`sasl.delegation_token`) is refused
  before it reaches the broker: its name is the token's id, Kafka's principal the token's
  owner, which the gateway cannot see (it would need DescribeDelegationToken rights over
  every user, and a token cache kept as fresh as the brokers'). Charged to the token id, its
  usage would match no quota; so the client gets an authentication error instead.
- GSSAPI and other mechanisms take a number of round trips the gateway cannot read from the
  tokens. In v1 the frames stay Kafka's, and the connection counts as authenticated, as
  `ANONYMOUS`, from the first token the broker accepts. Raw (v0), the gateway could not tell
  where the tokens end and Kafka frames begin again, so the connection is closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.gateway import apis, sasl
from app.gateway.limits import PRE_AUTH_FRAME
from app.usage.names import charged_name

#: What a step of the exchange leads to.
CONTINUE, ACCEPTED, REFUSED, UNFOLLOWABLE = "continue", "accepted", "refused", "unfollowable"
#: A client token the gateway refuses: a SCRAM delegation token (see the module docstring).
DELEGATION_TOKEN = "delegation_token"


@dataclass(frozen=True)
class Mechanism:
    rounds: int  # client token, server token: round trips of one exchange
    accepted: Callable[[bytes], bool]  # whether the server's last token says it succeeded


def _empty(token: bytes) -> bool:
    return token == b""


def _scram_final(token: bytes) -> bool:
    return token.startswith(b"v=")


#: The mechanisms whose exchange the gateway can follow token by token.
MECHANISMS: dict[str, Mechanism] = {
    "PLAIN": Mechanism(1, _empty),
    "OAUTHBEARER": Mechanism(1, _empty),  # a refusal is a non-empty error challenge
    "SCRAM-SHA-256": Mechanism(2, _scram_final),
    "SCRAM-SHA-512": Mechanism(2, _scram_final),
}


class Authentication:
    """One connection's SASL state. `sasl_listener`: the upstream listener requires SASL, so
    nothing but the authenticator's requests is served before the connection authenticates."""

    __slots__ = ("_claimed", "_mechanism", "_raw_next", "_rounds", "_tokens", "authenticated",
                 "raw", "sasl_listener", "user")

    def __init__(self, sasl_listener: bool) -> None:
        self.sasl_listener = sasl_listener
        self.authenticated = False  # a broker accepted an exchange on this connection
        self.user = sasl.ANONYMOUS  # the principal usage is charged to
        self.raw = False  # the client's next frame is a raw SASL token, not a Kafka request
        self._mechanism: str | None = None  # of the exchange in progress
        self._raw_next = False  # a SaslHandshake v0 awaits its answer
        self._claimed: str | None = None  # the name in the client's first token
        self._tokens = 0  # client tokens of the exchange in progress
        self._rounds = 0  # server tokens of the exchange in progress

    def allows(self, api_key: int) -> bool:
        """Whether a broker would serve this request now: before authentication on a SASL
        listener only what its authenticator serves (any other request closes the connection)."""
        return self.authenticated or not self.sasl_listener or api_key in apis.AUTHENTICATOR_APIS

    def charged(self, api_key: int) -> bool:
        """Whether a request is charged and throttled: on a SASL listener the authenticator
        serves the SASL requests, and ApiVersions before authentication, not KafkaApis
        (`SaslServerAuthenticator`), so they are not; elsewhere KafkaApis answers them like any
        request."""
        if not self.sasl_listener:
            return True
        return self.authenticated and api_key not in apis.SASL_APIS

    def frame_limit(self, max_request: int) -> int:
        """The largest frame the client may send next."""
        if self.raw or (self.sasl_listener and not self.authenticated):
            return PRE_AUTH_FRAME
        return max_request

    def handshake(self, version: int, mechanism: str) -> None:
        """A SaslHandshake request: a new exchange (a re-authentication keeps the principal
        until the broker accepts the new one)."""
        self._end()
        self._mechanism = mechanism
        self._raw_next = version == 0

    def handshake_answered(self, accepted: bool) -> str:
        """The broker's SaslHandshake answer (no error: `accepted`)."""
        raw, self._raw_next = self._raw_next, False
        if not accepted:
            self._end()
            return REFUSED
        if raw:
            if self._mechanism not in MECHANISMS:
                return UNFOLLOWABLE
            self.raw = True
        return CONTINUE

    def client_token(self, token: bytes) -> str:
        """A token from the client: raw, or the bytes of a SaslAuthenticate request.
        DELEGATION_TOKEN: it must not reach the broker (the exchange is over)."""
        if self._mechanism is None:
            return CONTINUE
        if self._tokens == 0:
            if sasl.delegation_token(self._mechanism, token):
                self._end()
                return DELEGATION_TOKEN
            self._claimed = sasl.username(self._mechanism, token)
        self._tokens += 1
        return CONTINUE

    def server_token(self, token: bytes, error: bool = False) -> str:
        """A token from the broker: raw, or a SaslAuthenticate answer (`error`: it has one)."""
        mechanism = self._mechanism
        if error or mechanism is None:
            self._end()
            return REFUSED if error else CONTINUE
        self._rounds += 1
        known = MECHANISMS.get(mechanism)
        if known is None:  # only in Kafka framing (v1): the broker accepted a token
            self.authenticated = True
            return CONTINUE
        if self._rounds < known.rounds:
            return CONTINUE
        accepted = known.accepted(token)
        if accepted:
            self.authenticated = True
            # bounded as the workers bound names, or a long name would escape its quotas
            self.user = charged_name(self._claimed) if self._claimed else sasl.ANONYMOUS
        self._end()
        return ACCEPTED if accepted else REFUSED

    def _end(self) -> None:
        self._mechanism = self._claimed = None
        self.raw = self._raw_next = False
        self._tokens = self._rounds = 0
