"""Certificates for a development cluster's TLS listeners, made per run with the `openssl` CLI.

One throwaway CA signs a server certificate for 127.0.0.1/localhost (every broker of the
loopback cluster presents it) and, on request, client certificates for mutual TLS. Keys are
EC P-256 in unencrypted PKCS#8 PEM, which both Kafka (`ssl.keystore.type=PEM`) and Python's
`ssl` read. Nothing is written outside the directory given; it lives as long as the cluster.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from app.errors import UserError

DAYS = "2"


@dataclass(frozen=True)
class CertPair:
    """A certificate (PEM) and its private key (PEM), and both in one file (Kafka's PEM
    keystore: the key, then the chain)."""

    cert: Path
    key: Path
    bundle: Path


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise UserError("TLS listeners need the openssl command (apt-get install openssl)")
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


class DevCA:
    """A certificate authority for one development cluster, in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.cert = directory / "ca.pem"
        self._key = directory / "ca.key"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", self._key.name, "-out", self.cert.name, "-days", DAYS,
                 "-subj", "/CN=quota-streams development CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)

    def issue(self, name: str, server: bool = True) -> CertPair:
        """A certificate for `name` signed by this CA: for 127.0.0.1 and localhost if `server`,
        else a client certificate whose subject is CN=`name` (mutual TLS)."""
        d = self.directory
        key, csr, cert = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem"
        ext = d / f"{name}.ext"
        usage = "serverAuth,clientAuth" if server else "clientAuth"
        lines = [f"extendedKeyUsage={usage}"]
        if server:
            lines.append("subjectAltName=IP:127.0.0.1,DNS:localhost")
        ext.write_text("\n".join(lines) + "\n")
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key.name, "-out", csr.name, "-subj",
                 "/CN=localhost" if server else f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", csr.name, "-CA", self.cert.name, "-CAkey",
                 self._key.name, "-CAcreateserial", "-out", cert.name, "-days", DAYS,
                 "-extfile", ext.name, cwd=d)
        bundle = d / f"{name}.bundle.pem"
        bundle.write_bytes(key.read_bytes() + cert.read_bytes())
        return CertPair(cert, key, bundle)
