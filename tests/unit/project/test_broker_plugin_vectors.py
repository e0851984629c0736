"""The broker plugin's seal test vectors are what app/signing.py writes today: a change of the
seal format makes this fail, not only the Java readers in production."""

from __future__ import annotations

import re

from app.devstack.kafka import ROOT
from app.signing import Signing

SEAL_TEST = ROOT / "jvm" / "broker-plugin" / "src" / "test" / "java" / "io" / "quotastreams" \
    / "broker" / "SealTest.java"


def _constant(source: str, name: str) -> str:
    match = re.search(rf'\b{name} = ((?:"(?:[^"\\]|\\.)*"\s*\+?\s*)+)(?:\.getBytes\(\w+\.\w+\))?;',
                      source)
    assert match, name
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1))
    return "".join(parts).replace('\\"', '"')


def test_the_java_vectors_are_the_python_seals() -> None:
    source = SEAL_TEST.read_text()
    signing = Signing.parse("k1:0123456789abcdef-secret")
    topic = _constant(source, "TOPIC")
    key = _constant(source, "KEY").encode()
    payload = _constant(source, "PAYLOAD").encode()
    assert signing.seal(topic, key, payload).decode() == _constant(source, "SEALED")
    assert signing.seal(topic, None, payload).decode() == _constant(source, "SEALED_NULL_KEY")
