"""The gateway's TLS means what its flags say: without the host name check the brokers' chain is
still verified, and --tls-client-ca admits only clients with a certificate that CA signed.
Certificates are made with the openssl CLI; the TLS servers listen on loopback."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.commands.gateway import build_config, register
from app.gateway.tls import client_context, server_context
from app.settings import load


def openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


class Certs:
    """A CA, certificates it signed (servers for 127.0.0.1 and for another name, a client),
    a self-signed server certificate and a client certificate of another CA."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.ca = self.authority("ca")
        self.other_ca = self.authority("other-ca")
        self.server = self.signed("server", "subjectAltName=IP:127.0.0.1")
        self.wrong_name = self.signed("wrong-name", "subjectAltName=DNS:wrong.example")
        self.client = self.signed("client", "extendedKeyUsage=clientAuth")
        self.stranger = self.signed("stranger", "extendedKeyUsage=clientAuth", self.other_ca)
        self.self_signed = self.authority("self-signed", "subjectAltName=IP:127.0.0.1")

    def authority(self, name: str, *ext: str) -> tuple[str, str]:
        cert, key = self.d / f"{name}.pem", self.d / f"{name}.key"
        extensions = [arg for e in ext for arg in ("-addext", e)]
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-days", "1", "-keyout", key, "-out", cert, "-subj", f"/CN={name}",
                *extensions)
        return str(cert), str(key)

    def signed(self, name: str, ext: str, ca: tuple[str, str] | None = None) -> tuple[str, str]:
        ca_cert, ca_key = ca or self.ca
        cert, key, csr = (self.d / f"{name}.pem", self.d / f"{name}.key",
                          self.d / f"{name}.csr")
        extfile = self.d / f"{name}.ext"
        extfile.write_text(ext + "\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
                "-CAcreateserial", "-days", "1", "-out", cert, "-extfile", extfile)
        return str(cert), str(key)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("tls"))


@contextlib.asynccontextmanager
async def serve(context: ssl.SSLContext) -> AsyncIterator[int]:
    """A loopback TLS server that writes b"ok" to each client it admits; yields its port."""

    async def greet(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


async def greeting(port: int, context: ssl.SSLContext) -> bytes:
    """What the server says to a client with `context`; a refused handshake raises."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                   server_hostname="127.0.0.1")
    try:
        return await asyncio.wait_for(reader.read(2), 10)
    finally:
        writer.close()


async def upstream_greeting(server: tuple[str, str], context: ssl.SSLContext) -> bytes:
    async with serve(server_context(*server)) as port:
        return await greeting(port, context)


async def admitted(port: int, context: ssl.SSLContext) -> bool:
    """Whether the server greets this client (TLS 1.3 reports a refused client certificate
    at the client's first read, not in its handshake)."""
    try:
        return await greeting(port, context) == b"ok"
    except (ssl.SSLError, ConnectionError):
        return False


async def test_without_the_host_name_check_the_chain_is_still_verified(certs: Certs) -> None:
    """No --upstream-ca: the system's CAs, which did not sign a self-signed certificate."""
    context = client_context(None, None, None, check_hostname=False)
    assert context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ssl.SSLCertVerificationError):
        await upstream_greeting(certs.self_signed, context)


async def test_without_the_host_name_check_a_certificate_of_the_ca_for_another_name_passes(
        certs: Certs) -> None:
    unchecked = client_context(certs.ca[0], None, None, check_hostname=False)
    assert await upstream_greeting(certs.wrong_name, unchecked) == b"ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        await upstream_greeting(certs.self_signed, unchecked)
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        await upstream_greeting(certs.wrong_name, client_context(certs.ca[0], None, None))


def as_client(ca: str, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


async def test_a_client_ca_admits_only_clients_with_a_certificate_it_signed(
        certs: Certs) -> None:
    async with serve(server_context(*certs.server, client_ca=certs.ca[0])) as port:
        assert await admitted(port, as_client(certs.ca[0], certs.client))
        assert not await admitted(port, as_client(certs.ca[0]))
        assert not await admitted(port, as_client(certs.ca[0], certs.stranger))
    async with serve(server_context(*certs.server)) as port:  # without it, anyone
        assert await admitted(port, as_client(certs.ca[0]))


def gateway_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["gateway", "--upstream", "127.0.0.1:9092", "--listen",
                              "127.0.0.1:9192", *argv])


def test_an_upstream_certificate_with_client_certificates_required(certs: Certs) -> None:
    config = build_config(gateway_args(
        "--tls-cert", certs.server[0], "--tls-key", certs.server[1],
        "--tls-client-ca", certs.ca[0], "--upstream-cert", certs.client[0], "--upstream-key",
        certs.client[1], "--upstream-ca", certs.ca[0]), load())
    assert config.client_tls is not None and config.client_tls.verify_mode == ssl.CERT_REQUIRED
    assert config.upstream_tls is not None and config.upstream_tls.check_hostname


def test_an_upstream_certificate_shared_by_every_client_when_said_so(certs: Certs) -> None:
    """And the certificate alone turns TLS to the brokers on: it is never sent in plaintext."""
    config = build_config(gateway_args(
        "--upstream-cert", certs.client[0], "--upstream-key", certs.client[1],
        "--upstream-cert-shared-identity", "--upstream-no-hostname-check"), load())
    assert config.client_tls is None and config.upstream_tls is not None
    assert not config.upstream_tls.check_hostname
    assert config.upstream_tls.verify_mode == ssl.CERT_REQUIRED
