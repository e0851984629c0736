"""The dev cluster's extra classpath: a broker plugin's jar after Kafka's, or a clear error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.devstack.kafka import ClusterError, KafkaCluster


def test_extra_jars_follow_kafkas(tmp_path: Path) -> None:
    jar = tmp_path / "plugin.jar"
    jar.write_bytes(b"PK")
    cluster = KafkaCluster(classpath=(jar,))
    assert cluster._classpath(tmp_path / "libs").split(os.pathsep) == [
        f"{tmp_path / 'libs'}/*", str(jar)]
    assert KafkaCluster()._classpath(tmp_path / "libs") == f"{tmp_path / 'libs'}/*"


def test_a_missing_jar_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="make setup"):
        KafkaCluster(classpath=(tmp_path / "absent.jar",))._classpath(tmp_path)
