"""Structural checks of the deployment files (Docker and Kubernetes cannot run here).

What is checked is what breaks a deployment silently: an environment variable the code does not
read (or a value it rejects at start), a port or path that differs between the worker, its probes
and Prometheus, a dashboard or alert on a metric nobody exports, a volume not mounted where the
RocksDB tables are written, a disruption budget that selects no pod.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import SETTINGS, load

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SETTINGS_BY_ENV = {s.env: s for s in SETTINGS}

# The metrics the workers export, as documented for dashboards and alerts: a part of what their
# registry holds (`exported_metrics`).
DOCUMENTED_METRICS = frozenset(
    {
        "quota_streams_events_total",
        "quota_streams_samples_total",
        "quota_streams_deadletter_total",
        "quota_streams_directives_total",
        "quota_streams_throttle_time_ms",
        "quota_streams_event_to_directive_latency_seconds",
        "quota_streams_consumer_lag_records",
        "quota_streams_active_entities",
        "quota_streams_entity_observed",
        "quota_streams_entity_limit",
        "quota_streams_recovery_complete",
        "quota_streams_throttled_entities",
    }
)
HISTOGRAMS = frozenset(
    {
        "quota_streams_throttle_time_ms",
        "quota_streams_event_to_directive_latency_seconds",
    }
)
#: metrics Prometheus has of itself (`up`) and of kube-state-metrics (the audit Job's status)
PROMETHEUS_BUILTINS = frozenset({"up", "kube_job_status_failed"})


def exported_metrics() -> frozenset[str]:
    """What the workers, the gateways and the broker plugin export, as Prometheus names them."""
    from app.pipeline.metrics import WorkerMetrics

    return registry_names(WorkerMetrics().registry) | gateway_metrics() | plugin_metrics()


def registry_names(registry: Any) -> frozenset[str]:
    """A registry's metric names as Prometheus shows them (a counter's with `_total`)."""
    names = set()
    for family in registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
    return frozenset(names)


def plugin_metrics() -> frozenset[str]:
    """What the brokers' JMX exporter names the broker plugin's beans (its rules)."""
    rules = yaml.safe_load((DEPLOY / "broker-plugin" / "metrics" / "jmx-exporter.yaml").read_text())
    return frozenset(rule["name"] for rule in rules["rules"])


def gateway_metrics() -> frozenset[str]:
    """What a gateway exports (its own registry), as Prometheus names them."""
    from app.gateway.metrics import GatewayMetrics

    return registry_names(GatewayMetrics().registry)


# --------------------------------------------------------------------------- loading


def load_yaml_docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def kustomized(gateway: bool) -> dict[str, dict[str, Any]]:
    """The kustomization's objects of the gateways (`gateway`) or of the rest, by kind (one
    object per kind in each)."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    objects: dict[str, dict[str, Any]] = {}
    for resource in kustomization["resources"]:
        for doc in load_yaml_docs(K8S / resource):
            labels = doc["metadata"].get("labels", {})
            if (labels.get("app.kubernetes.io/component") == "gateway") != gateway:
                continue
            assert doc["kind"] not in objects, f"two {doc['kind']} objects"
            objects[doc["kind"]] = doc
    return objects


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    """The objects of the workers, their topics and namespace, by kind."""
    return kustomized(gateway=False)


@pytest.fixture(scope="module")
def gateway_k8s() -> dict[str, dict[str, Any]]:
    """The gateways' objects (gateway.yaml), by kind."""
    return kustomized(gateway=True)


@pytest.fixture(scope="module")
def configmap(k8s: dict[str, dict[str, Any]]) -> dict[str, str]:
    return k8s["ConfigMap"]["data"]


@pytest.fixture(scope="module")
def pod_spec(k8s: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return k8s["StatefulSet"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def worker_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "worker"]
    return container


@pytest.fixture(scope="module")
def prometheus() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())


@pytest.fixture(scope="module")
def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())


def qs_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services running the project's image."""
    return {
        n: s for n, s in compose["services"].items() if s.get("image") == "quota-streams:latest"
    }


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def host_port_mappings(service: dict[str, Any]) -> Iterator[tuple[str, int, int]]:
    for entry in service.get("ports", []):
        ip, host, container = str(entry).split(":")
        yield ip, int(host), int(container)


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """target -> source of a compose service's volumes (short syntax)."""
    result = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        result[target] = source
    return result


# --------------------------------------------------------------------------- PromQL


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (good enough for the expressions here)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors, $__rate_interval
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    keywords = {"and", "or", "unless", "bool", "offset", "by", "without", "inf", "nan"}
    names = set()
    for match in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", expr):
        if match.group(1).lower() not in keywords:
            names.add(match.group(1))
    return names


def gateway_histograms() -> frozenset[str]:
    from app.gateway.metrics import GatewayMetrics

    return frozenset(f.name for f in GatewayMetrics().registry.collect() if f.type == "histogram")


def base_metric(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        stem = name.removesuffix(suffix)
        if stem != name and stem in HISTOGRAMS | gateway_histograms():
            return stem
    return name


def test_metric_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le) (rate(quota_streams_throttle_time_ms_bucket"
        '{instance=~"$instance"}[$__rate_interval]))) > 0 and on (quota) '
        "(sum(rate(quota_streams_directives_total[5m])) or vector(0)) == 0 or up == 0"
    )
    assert metric_names(expr) == {
        "quota_streams_throttle_time_ms_bucket",
        "quota_streams_directives_total",
        "up",
    }
    assert base_metric("quota_streams_throttle_time_ms_bucket") == "quota_streams_throttle_time_ms"
    assert base_metric("quota_streams_events_total_count") == "quota_streams_events_total_count"


def test_documented_metrics_are_exported() -> None:
    """A metric named in the deployment docs but not exported would make empty panels."""
    assert DOCUMENTED_METRICS <= exported_metrics()


# --------------------------------------------------------------------------- files parse


def test_every_deploy_file_parses() -> None:
    yaml_files = sorted(DEPLOY.rglob("*.yml")) + sorted(DEPLOY.rglob("*.yaml"))
    assert len(yaml_files) >= 10
    for path in yaml_files + [ROOT / "docker-compose.yml"]:
        assert load_yaml_docs(path), f"{path} is empty"
    json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())


def test_kustomization_references_existing_files() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["namespace"] == "quota-streams"
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), resource
    for generator in kustomization.get("configMapGenerator", []):
        for file in generator["files"]:
            assert (K8S / file).is_file(), file


def test_k8s_objects_present(k8s: dict[str, dict[str, Any]]) -> None:
    assert {
        "Namespace",
        "ConfigMap",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
        "Job",
        "NetworkPolicy",
    } <= set(k8s)
    assert k8s["Namespace"]["metadata"]["name"] == "quota-streams"


# --------------------------------------------------------------------------- settings


def assert_valid_settings(env: dict[str, str], where: str, *, complete: bool) -> None:
    for name, value in env.items():
        assert name in SETTINGS_BY_ENV, f"{where}: {name} is not read by app/settings.py"
        try:
            SETTINGS_BY_ENV[name].parse(value.strip())
        except ValueError as exc:
            pytest.fail(f"{where}: {name}={value!r} is rejected: {exc}")
        assert not SETTINGS_BY_ENV[name].secret, f"{where} holds the secret {name}"
    if complete:
        missing = {n for n, s in SETTINGS_BY_ENV.items() if not s.secret} - set(env)
        assert not missing, f"{where} leaves {sorted(missing)} to their defaults"


def test_configmap_holds_exactly_the_settings(configmap: dict[str, str]) -> None:
    assert_valid_settings(configmap, "ConfigMap", complete=True)
    assert configmap["QS_STANDBY_REPLICAS"] == "1"
    assert configmap["KAFKA_BOOTSTRAP_SERVERS"], "an empty value starts the embedded demo broker"


def test_k8s_containers_take_settings_from_the_configmap(
    k8s: dict[str, dict[str, Any]], pod_spec: dict[str, Any]
) -> None:
    cm_name = k8s["ConfigMap"]["metadata"]["name"]
    job_spec = k8s["Job"]["spec"]["template"]["spec"]
    containers = (
        pod_spec["containers"] + pod_spec.get("initContainers", []) + job_spec["containers"]
    )
    for container in containers:
        refs = [e["configMapRef"]["name"] for e in container.get("envFrom", []) if "configMapRef" in e]
        assert refs == [cm_name], container["name"]
        inline = {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}
        assert_valid_settings(inline, f"container {container['name']}", complete=False)


def test_the_worker_takes_secret_settings_from_a_secret(pod_spec: dict[str, Any]) -> None:
    (worker,) = [c for c in pod_spec["containers"] if c["name"] == "worker"]
    secrets = [e["secretRef"] for e in worker["envFrom"] if "secretRef" in e]
    assert secrets == [{"name": "quota-streams-kafka-credentials", "optional": True}]
    # the ones the Secret holds (statefulset.yaml's comment names them)
    assert [n for n, s in SETTINGS_BY_ENV.items() if s.secret] == [
        "KAFKA_SASL_PASSWORD", "QS_SIGNING_KEYS", "QS_CONSOLE_TOKEN"]


def test_compose_env_is_exactly_the_settings(compose: dict[str, Any]) -> None:
    services = qs_services(compose)
    assert set(services) >= {"worker-1", "worker-2", "simulator"}
    for name, service in [*services.items(), ("topics", compose["services"]["topics"])]:
        env = env_of(service)
        assert_valid_settings(env, f"compose {name}", complete=True)
        assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert not [k for k in env_of(compose["services"]["kafka"]) if k.startswith("QS_")]


def test_compose_and_k8s_agree_on_names(compose: dict[str, Any], configmap: dict[str, str]) -> None:
    """Topic names, app id and state dir are the same in both deployments (sizes may differ)."""
    env = env_of(compose["services"]["worker-1"])
    for name in SETTINGS_BY_ENV:
        if name.startswith("QS_TOPIC_") or name in ("QS_APP_ID", "QS_STATE_DIR", "QS_WEB_PORT"):
            assert env[name] == configmap[name], name


def test_topics_script_reads_only_settings() -> None:
    script = (K8S / "create-topics.sh").read_text()
    used = set(re.findall(r"\$\{?((?:QS_|KAFKA_)[A-Z_]+)", script))
    assert "QS_PARTITIONS" in used and "KAFKA_BOOTSTRAP_SERVERS" in used
    assert used <= set(SETTINGS_BY_ENV), used - set(SETTINGS_BY_ENV)


def dockerfile_lines() -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_dockerfile() -> None:
    lines = dockerfile_lines()
    # the engine is compiled in a build stage with a compiler; the image runs on the slim base
    stages = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert stages == ["python:3.11", "python:3.11-slim"]
    assert "RUN pip wheel --no-deps --wheel-dir /wheels ." in lines
    assert "COPY --from=build /wheels /wheels" in lines
    assert any(re.match(r"RUN pip install /wheels/\*\.whl", line) for line in lines)
    (entrypoint,) = [line for line in lines if line.startswith("ENTRYPOINT")]
    assert json.loads(entrypoint.removeprefix("ENTRYPOINT")) == ["quota-streams"]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    for line in lines:
        if line.startswith("ENV "):
            for name in re.findall(r"(\w+)=", line):
                if name.startswith("QS_") or name == "KAFKA_BOOTSTRAP_SERVERS":
                    assert name in SETTINGS_BY_ENV, name
    # the scenario files the simulator is pointed at are in the image
    assert any(re.match(r"COPY scenarios \.?/?(app/)?scenarios", line) for line in lines)
    assert "WORKDIR /app" in lines


def dockerfile_uid() -> int:
    users = [line.split()[1] for line in dockerfile_lines() if line.startswith("USER ")]
    return int(users[-1].split(":")[0])


def test_commands_are_ones_the_cli_accepts(
    compose: dict[str, Any], worker_container: dict[str, Any]
) -> None:
    """The image's entrypoint is `quota-streams`: every command given to it must parse."""
    from app.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    commands = [worker_container["args"]] + [s["command"] for s in qs_services(compose).values()]
    assert ["worker", "--no-create-topics"] in commands
    for argv in commands:
        if argv[0] not in sub.choices:
            assert argv[0] == "simulate", f"{argv[0]} is not a quota-streams command"
            continue  # being written
        parser.parse_args(argv)


# --------------------------------------------------------------------------- compose


def test_compose_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "topics", "worker-1", "worker-2", "simulator", "prometheus", "grafana"} <= set(
        services
    )
    kafka = services["kafka"]
    assert kafka["image"] == "apache/kafka:3.9.0"
    kenv = env_of(kafka)
    assert set(kenv["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}  # KRaft
    assert kenv["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    assert kenv["CLUSTER_ID"]
    assert kenv["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "healthcheck" in kafka

    topics = services["topics"]
    assert topics["image"] == kafka["image"]
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert mounts(topics)["/scripts/create-topics.sh"] == "./deploy/k8s/create-topics.sh"

    for name in ("worker-1", "worker-2", "simulator"):
        service = services[name]
        assert service["build"] in (".", {"context": "."})
        assert service["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert services["simulator"]["command"][:2] == ["simulate", "/app/scenarios/mixed.yaml"]

    assert services["prometheus"]["depends_on"] and services["grafana"]["depends_on"]
    assert mounts(services["prometheus"])["/etc/prometheus"] == "./deploy/prometheus"
    genv = env_of(services["grafana"])
    assert genv["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert genv["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert all(src.startswith("./deploy/grafana") for src in mounts(services["grafana"]).values())


def test_compose_workers_have_their_own_state_volume(compose: dict[str, Any]) -> None:
    seen = set()
    for name in ("worker-1", "worker-2"):
        service = compose["services"][name]
        assert service["command"] == ["worker", "--no-create-topics"]  # `topics` creates them
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        volume = mounts(service)[env_of(service)["QS_STATE_DIR"]]
        assert volume in compose["volumes"], f"{volume} is not a named volume"
        seen.add(volume)
    assert len(seen) == 2, "the workers share a RocksDB directory"
    # the broker keeps its data too: worker state newer than the changelogs stops the workers
    assert mounts(compose["services"]["kafka"])["/var/lib/kafka/data"] in compose["volumes"]


def test_compose_host_ports_are_loopback_only(compose: dict[str, Any]) -> None:
    published = []
    for name, service in compose["services"].items():
        for ip, host, _ in host_port_mappings(service):
            assert ip == "127.0.0.1", f"{name} publishes on {ip}"
            published.append(host)
    assert len(published) == len(set(published)), "a host port is published twice"
    assert 9092 in published


def test_compose_worker_ports_and_health_use_the_web_port(compose: dict[str, Any]) -> None:
    for name in ("worker-1", "worker-2"):
        service = compose["services"][name]
        port = int(env_of(service)["QS_WEB_PORT"])
        assert [c for _, _, c in host_port_mappings(service)] == [port]
        assert f"127.0.0.1:{port}/ready" in " ".join(service["healthcheck"]["test"])


# --------------------------------------------------------------------------- kubernetes


def test_statefulset(
    k8s: dict[str, dict[str, Any]],
    pod_spec: dict[str, Any],
    worker_container: dict[str, Any],
    configmap: dict[str, str],
) -> None:
    sts = k8s["StatefulSet"]["spec"]
    assert sts["replicas"] == 3
    assert worker_container["image"] == "quota-streams:latest"
    assert worker_container["args"] == ["worker", "--no-create-topics"]  # the Job creates them
    # the state volume: one claim per worker, mounted where the tables are written
    claims = {t["metadata"]["name"] for t in sts["volumeClaimTemplates"]}
    state_mounts = [m for m in worker_container["volumeMounts"] if m["name"] in claims]
    assert [m["mountPath"] for m in state_mounts] == [configmap["QS_STATE_DIR"]]
    assert pod_spec["securityContext"]["runAsUser"] == dockerfile_uid()
    assert pod_spec["securityContext"]["fsGroup"] == dockerfile_uid()
    # graceful stop
    assert pod_spec["terminationGracePeriodSeconds"] >= 30
    assert worker_container["lifecycle"]["preStop"]
    # sizing
    resources = worker_container["resources"]
    assert resources["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert set(resources["limits"]) == {"cpu", "memory"}
    anti = pod_spec["affinity"]["podAntiAffinity"]
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", []) + [
        t["podAffinityTerm"]
        for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
    ]
    assert terms and all(
        t["labelSelector"]["matchLabels"].items() <= sts["template"]["metadata"]["labels"].items()
        for t in terms
    )


def test_probes_and_ports(
    k8s: dict[str, dict[str, Any]], worker_container: dict[str, Any], configmap: dict[str, str]
) -> None:
    web_port = int(configmap["QS_WEB_PORT"])
    ports = {p["name"]: p["containerPort"] for p in worker_container["ports"]}
    assert ports == {"web": web_port}

    def probe_port(probe: dict[str, Any]) -> int:
        port = probe["httpGet"]["port"]
        return ports[port] if isinstance(port, str) else port

    readiness, liveness = worker_container["readinessProbe"], worker_container["livenessProbe"]
    assert readiness["httpGet"]["path"] == "/ready"
    assert probe_port(readiness) == web_port
    # a worker recovering its tables is not ready, but must not be restarted for it
    assert liveness["httpGet"]["path"] != "/ready"
    assert probe_port(liveness) == web_port

    service = k8s["Service"]
    assert service["spec"]["clusterIP"] == "None"
    assert k8s["StatefulSet"]["spec"]["serviceName"] == service["metadata"]["name"]
    for port in service["spec"]["ports"]:
        assert port["port"] == web_port
        assert port["targetPort"] in ("web", web_port)


def test_selectors_match_the_worker_pods(k8s: dict[str, dict[str, Any]]) -> None:
    sts = k8s["StatefulSet"]["spec"]
    pod_labels = sts["template"]["metadata"]["labels"]
    job_labels = k8s["Job"]["spec"]["template"]["metadata"]["labels"]
    for name, selector in [
        ("StatefulSet", sts["selector"]["matchLabels"]),
        ("PodDisruptionBudget", k8s["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]),
        ("Service", k8s["Service"]["spec"]["selector"]),
    ]:
        assert selector.items() <= pod_labels.items(), f"{name} does not select the workers"
        assert not selector.items() <= job_labels.items(), f"{name} also selects the topics Job"
    assert k8s["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


# --------------------------------------------------------------------------- topics


def test_topic_creation_is_wired(
    compose: dict[str, Any], k8s: dict[str, dict[str, Any]], pod_spec: dict[str, Any]
) -> None:
    job = k8s["Job"]["spec"]["template"]["spec"]
    (job_container,) = job["containers"]
    assert job_container["image"] == compose["services"]["kafka"]["image"]
    assert job_container["command"][-2:] == ["create", "3"]  # replicated like the cluster
    topics = compose["services"]["topics"]
    assert topics["entrypoint"][-1] == "/scripts/create-topics.sh"
    assert topics["command"] == ["create", "1"]  # one broker
    (init,) = pod_spec["initContainers"]
    assert init["command"][-2:] == ["/scripts/create-topics.sh", "check"]
    # the generated ConfigMap holding the script is the one mounted at /scripts
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    for spec, container in ((job, job_container), (pod_spec, init)):
        (volume,) = [
            v for v in spec["volumes"] if v.get("configMap", {}).get("name") == generator["name"]
        ]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["mountPath"] == "/scripts"


FAKE_KAFKA_TOPICS = """#!/usr/bin/env bash
echo "$*" >> "$LOG"
if [[ " $* " == *" --describe "* ]]; then cat "$DESCRIBE"; fi
"""


class TopicsScript:
    """deploy/k8s/create-topics.sh run against a fake kafka-topics.sh that logs its arguments."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp = tmp_path
        fake = tmp_path / "kafka-topics.sh"
        fake.write_text(FAKE_KAFKA_TOPICS)
        fake.chmod(0o755)
        original = (K8S / "create-topics.sh").read_text()
        assert "KT=/opt/kafka/bin/kafka-topics.sh" in original
        self.script = tmp_path / "create-topics.sh"
        self.script.write_text(original.replace("KT=/opt/kafka/bin/kafka-topics.sh", f"KT={fake}"))
        self.env = {
            **env,
            "LOG": str(tmp_path / "log"),
            "DESCRIBE": str(tmp_path / "describe"),
            "PATH": "/usr/bin:/bin",
        }
        self.describe({})

    def describe(self, counts: dict[str, int]) -> None:
        lines = []
        for topic, count in counts.items():
            lines.append(
                f"Topic: {topic}\tTopicId: x\tPartitionCount: {count}\tReplicationFactor: 1"
            )
            lines.append(f"\tTopic: {topic}\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1")
        (self.tmp / "describe").write_text("\n".join(lines) + "\n")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        (self.tmp / "log").write_text("")
        return subprocess.run(
            ["bash", str(self.script), *args], env=self.env, capture_output=True, text=True
        )

    def created(self) -> dict[str, tuple[int, dict[str, str], int]]:
        """topic -> (partitions, configs, replication factor) of each --create call."""
        result = {}
        for line in (self.tmp / "log").read_text().splitlines():
            if "--create" in line:
                words = line.split()
                opt = {
                    words[i]: words[i + 1]
                    for i in range(len(words) - 1)
                    if words[i].startswith("--")
                }
                configs = dict(
                    w.split("=", 1) for i, w in enumerate(words) if words[i - 1] == "--config"
                )
                result[opt["--topic"]] = (
                    int(opt["--partitions"]),
                    configs,
                    int(opt["--replication-factor"]),
                )
        return result


needs_bash = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("awk") is None, reason="needs bash and awk"
)


@needs_bash
@pytest.mark.parametrize("where", ["compose", "k8s"])
def test_topics_script_creates_the_apps_topics(
    tmp_path: Path, where: str, compose: dict[str, Any], configmap: dict[str, str]
) -> None:
    """Same names, partition counts and compaction as app/pipeline/topology.py:topic_specs."""
    from app.pipeline.topology import topic_specs
    from app.settings import load

    env = env_of(compose["services"]["topics"]) if where == "compose" else dict(configmap)
    rf = "1" if where == "compose" else "3"
    script = TopicsScript(tmp_path, env)
    specs = topic_specs(load(env))
    script.describe({name: partitions for name, partitions, _ in specs})
    done = script.run("create", rf)
    assert done.returncode == 0, done.stderr
    created = script.created()
    assert set(created) == {name for name, _, _ in specs}
    for name, partitions, configs in specs:
        got_partitions, got_configs, got_rf = created[name]
        assert got_partitions == partitions, name
        assert got_rf == int(rf)
        assert got_configs.get("cleanup.policy") == (configs or {}).get(
            "cleanup.policy", "delete"
        ), name
        assert ("min.insync.replicas" in got_configs) == (got_rf >= 3)


@needs_bash
def test_topics_script_check_reports_missing_and_wrong_topics(
    tmp_path: Path, compose: dict[str, Any]
) -> None:
    from app.pipeline.topology import topic_specs
    from app.settings import load

    env = env_of(compose["services"]["topics"])
    script = TopicsScript(tmp_path, env)
    specs = topic_specs(load(env))
    counts = {name: partitions for name, partitions, _ in specs}
    script.describe(counts)
    assert script.run("check").returncode == 0
    missing, wrong = specs[0][0], specs[1][0]
    del counts[missing]
    counts[wrong] += 1
    script.describe(counts)
    checked = script.run("check")
    assert checked.returncode == 1
    assert f"MISSING {missing}" in checked.stderr and f"WRONG {wrong}" in checked.stderr
    assert "--create" not in (tmp_path / "log").read_text(), "check must not create"

    script.env.pop("QS_PARTITIONS")
    assert script.run("check").returncode != 0, "a missing setting must stop the script"


# --------------------------------------------------------------------------- prometheus


def test_prometheus_scrapes_the_workers_web_port(
    prometheus: dict[str, Any],
    compose: dict[str, Any],
    k8s: dict[str, dict[str, Any]],
    worker_container: dict[str, Any],
) -> None:
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    # compose: static targets, one per worker service, on its QS_WEB_PORT
    static = [t for c in jobs["quota-streams-compose"]["static_configs"] for t in c["targets"]]
    expected = {
        f"{name}:{env_of(s)['QS_WEB_PORT']}"
        for name, s in qs_services(compose).items()
        if s.get("command", [""])[0] == "worker"
    }
    assert set(static) == expected and len(expected) == 2
    # kubernetes: pod discovery in the namespace, kept to the worker pods' `web` port
    kube = jobs["quota-streams"]
    (sd,) = kube["kubernetes_sd_configs"]
    assert sd["role"] == "pod"
    assert sd["namespaces"]["names"] == [k8s["Namespace"]["metadata"]["name"]]
    pod_labels = k8s["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    port_names = {p["name"] for p in worker_container["ports"]}
    kept = {
        tuple(r["source_labels"]): r["regex"]
        for r in kube["relabel_configs"]
        if r.get("action") == "keep"
    }
    label_keep = [(src, regex) for src, regex in kept.items() if "pod_label" in src[0]]
    assert label_keep
    for sources, regex in label_keep:
        values = [_label_from_meta(s, pod_labels) for s in sources]
        assert re.fullmatch(regex, ";".join(values)), (sources, regex)
    assert re.fullmatch(kept[("__meta_kubernetes_pod_container_port_name",)], "web")
    assert "web" in port_names
    for job in jobs.values():
        assert job.get("metrics_path", "/metrics") == "/metrics"


def _label_from_meta(meta: str, labels: dict[str, str]) -> str:
    """Prometheus sanitises label names (`.`, `/`, `-` become `_`): find the pod label back."""
    wanted = meta.removeprefix("__meta_kubernetes_pod_label_")
    (name,) = [k for k in labels if re.sub(r"[^a-zA-Z0-9_]", "_", k) == wanted]
    return labels[name]


def test_prometheus_loads_the_alert_rules(
    prometheus: dict[str, Any], compose: dict[str, Any]
) -> None:
    mount = mounts(compose["services"]["prometheus"])
    (target,) = [t for t, src in mount.items() if src == "./deploy/prometheus"]
    assert prometheus["rule_files"] == [f"{target}/alerts.yml"]


def test_alerts(alerts: list[dict[str, Any]]) -> None:
    allowed = exported_metrics() | PROMETHEUS_BUILTINS
    assert HISTOGRAMS <= allowed
    assert len({rule["alert"] for rule in alerts}) == len(alerts)
    for rule in alerts:
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        unknown = {base_metric(n) for n in names} - allowed
        assert not unknown, f"{rule['alert']} uses {unknown}"
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"]

    def alert_on(metric: str) -> list[dict[str, Any]]:
        return [r for r in alerts if metric in metric_names(r["expr"])]

    assert alert_on("quota_streams_consumer_lag_records")
    assert alert_on("quota_streams_deadletter_total")
    (silent,) = [
        r
        for r in alert_on("quota_streams_throttled_entities")
        if "quota_streams_directives_total" in metric_names(r["expr"])
    ]
    assert silent["for"] == "5m" and "== 0" in silent["expr"]
    (stuck,) = alert_on("quota_streams_recovery_complete")
    assert stuck["for"] == "10m" and "== 0" in stuck["expr"]
    assert any(re.search(r"\bup\b.*== 0", r["expr"]) for r in alert_on("up"))
    # the job names the alerts select are the scrape jobs
    jobs = {
        j["job_name"]
        for j in yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())[
            "scrape_configs"
        ]
    }
    # every scrape job is watched, workers' and gateways' apart
    gateway_jobs = {j for j in jobs if "gateway" in j}
    watched: set[str] = set()
    for rule in alert_on("up"):
        (regex,) = re.findall(r'job=~"([^"]+)"', rule["expr"])
        matched = {j for j in jobs if re.fullmatch(regex, j)}
        assert matched in (gateway_jobs, jobs - gateway_jobs), rule["alert"]
        watched |= matched
    assert watched == jobs


# --------------------------------------------------------------------------- grafana


def dashboard_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return [p for p in panels if p["type"] != "row"]


def test_dashboard_uses_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    allowed = exported_metrics()
    panels = dashboard_panels(dashboard)
    used = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            unknown = {base_metric(n) for n in names} - allowed
            assert not unknown, f"panel {panel['title']!r} uses {unknown}"
            used |= {base_metric(n) for n in names}
    # and every documented metric is shown somewhere
    assert DOCUMENTED_METRICS <= used, DOCUMENTED_METRICS - used


def test_dashboard_structure(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))

    # no two panels overlap on the 24-column grid
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]

    panels = dashboard_panels(dashboard)
    for panel in panels:
        for target in [panel, *panel["targets"]]:
            assert target["datasource"]["uid"] == "${datasource}"
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels}
    heatmaps = [p for p in panels if p["type"] == "heatmap"]
    assert heatmaps and all(
        "quota_streams_throttle_time_ms_bucket" in exprs[p["title"]] for p in heatmaps
    )
    latency = [
        e for e in exprs.values() if "quota_streams_event_to_directive_latency_seconds_bucket" in e
    ]
    assert (
        latency
        and "histogram_quantile(0.5," in latency[0]
        and "histogram_quantile(0.99," in latency[0]
    )
    assert any(
        "by (quota, action)" in e and "quota_streams_directives_total" in e for e in exprs.values()
    )
    assert any("by (topic, partition)" in e and "consumer_lag" in e for e in exprs.values())
    assert any(
        "quota_streams_entity_observed" in e and "quota_streams_entity_limit" in e
        for e in exprs.values()
    )


def test_grafana_provisioning(compose: dict[str, Any]) -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    (ds,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert ds["type"] == "prometheus"
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", ds["url"]).groups()
    assert host in compose["services"]
    assert [c for _, _, c in host_port_mappings(compose["services"][host])] == [int(port)]

    (provider,) = yaml.safe_load((provisioning / "dashboards" / "quota-streams.yml").read_text())[
        "providers"
    ]
    grafana_mounts = mounts(compose["services"]["grafana"])
    assert grafana_mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    dashboards = [
        t for t, src in grafana_mounts.items() if src == "./deploy/grafana/dashboard.json"
    ]
    assert len(dashboards) == 1
    assert Path(dashboards[0]).parent == Path(provider["options"]["path"])
    home = env_of(compose["services"]["grafana"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == dashboards[0]


# --------------------------------------------------------------------------- gateways


@pytest.fixture(scope="module")
def gateway_container(gateway_k8s: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (container,) = gateway_k8s["Deployment"]["spec"]["template"]["spec"]["containers"]
    return container


@pytest.fixture
def gateway_args(
    gateway_container: dict[str, Any], configmap: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> argparse.Namespace:
    """The gateway container's command as the CLI parses it, `$(VAR)` expanded from the
    ConfigMap as the kubelet does; the ConfigMap is the environment."""
    from app.cli import build_parser

    for name, value in configmap.items():
        monkeypatch.setenv(name, value)
    argv = [re.sub(r"\$\((\w+)\)", lambda m: configmap[m.group(1)], a)
            for a in gateway_container["args"]]
    assert argv[0] == "gateway"
    return build_parser().parse_args(argv)


def gateway_rule(args: argparse.Namespace) -> Any:
    """The port rule the gateway builds from these flags (app/commands/gateway.py)."""
    from app.commands.gateway import build_config
    from app.gateway.nodes import PortRule

    config = build_config(args, load())
    assert config.first_node_id is not None and config.node_port_base is not None, (
        "every replica must map the same ports: give --first-node-id and --node-port-base")
    return PortRule(config.advertised_host, config.node_port_base, config.first_node_id,
                    config.max_nodes)


def test_the_docs_port_rule_is_the_codes() -> None:
    """The rule the manifests are checked against is the one docs/gateway.md gives."""
    from app.gateway.nodes import PortRule

    docs = (ROOT / "docs" / "gateway.md").read_text()
    assert "port(broker n) = --node-port-base + (n - --first-node-id)" in docs
    rule = PortRule("gw", node_port_base=9193, first_node_id=1, max_nodes=3)
    assert [rule.port(n) for n in (0, 1, 2, 3, 4)] == [None, 9193, 9194, 9195, None]


def test_gateway_ports_follow_the_port_rule(
    gateway_k8s: dict[str, dict[str, Any]],
    gateway_container: dict[str, Any],
    gateway_args: argparse.Namespace,
) -> None:
    rule = gateway_rule(gateway_args)
    first = rule.first_node_id
    brokers = {f"broker-{n}": rule.port(n) for n in range(first, first + rule.max_nodes)}
    kafka_ports = {"bootstrap": gateway_args.listen[1], **brokers}
    assert None not in kafka_ports.values()
    ports = {p["name"]: p["containerPort"] for p in gateway_container["ports"]}
    assert ports == {**kafka_ports, "metrics": gateway_args.metrics_port}
    # the Service offers exactly the Kafka ports, each on its own number
    service = gateway_k8s["Service"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == kafka_ports
    for port in service["spec"]["ports"]:
        assert port["targetPort"] == port["name"]
    assert service["spec"]["selector"].items() <= (
        gateway_k8s["Deployment"]["spec"]["template"]["metadata"]["labels"].items())
    # clients are told the Service's name, in the namespace the kustomization deploys to
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert rule.advertised_host == (
        f"{service['metadata']['name']}.{kustomization['namespace']}.svc")
    assert gateway_args.metrics_host == "0.0.0.0"  # the kubelet and Prometheus reach it


def test_gateway_network_policies(
    gateway_k8s: dict[str, dict[str, Any]],
    k8s: dict[str, dict[str, Any]],
    gateway_container: dict[str, Any],
    worker_container: dict[str, Any],
    gateway_args: argparse.Namespace,
) -> None:
    kafka_ports = {p["containerPort"] for p in gateway_container["ports"] if p["name"] != "metrics"}
    pod_labels = gateway_k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    policy = gateway_k8s["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    opened: dict[int, list[Any]] = {}
    for rule in policy["ingress"]:
        for port in rule["ports"]:
            opened.setdefault(port["port"], []).extend(rule["from"])
    # every namespace reaches the Kafka ports; only the monitoring namespace the metrics port
    assert set(opened) == kafka_ports | {gateway_args.metrics_port}
    for port in kafka_ports:
        assert opened[port] == [{"namespaceSelector": {}}]
    (monitoring,) = opened[gateway_args.metrics_port]
    assert monitoring["namespaceSelector"]["matchLabels"]

    # the workers take only scrapes of their web port, and each other's console questions
    workers = k8s["NetworkPolicy"]["spec"]
    assert workers["podSelector"]["matchLabels"].items() <= (
        k8s["StatefulSet"]["spec"]["template"]["metadata"]["labels"].items())
    (rule,) = workers["ingress"]
    assert [p["port"] for p in rule["ports"]] == [
        p["containerPort"] for p in worker_container["ports"] if p["name"] == "web"]
    assert rule["from"] == [monitoring, {"podSelector": workers["podSelector"]}]

    # the brokers (their own namespace) accept only themselves and quota-streams' own pods
    (brokers,) = load_yaml_docs(K8S / "kafka-networkpolicy.yaml")
    assert brokers["kind"] == "NetworkPolicy"
    own, ours = brokers["spec"]["ingress"]
    assert own == {"from": [{"podSelector": {}}]} and "ports" not in ours
    (peer,) = ours["from"]
    namespace = yaml.safe_load((K8S / "kustomization.yaml").read_text())["namespace"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}
    (components,) = peer["podSelector"]["matchExpressions"]
    assert components["key"] == "app.kubernetes.io/component" and components["operator"] == "In"
    job_labels = k8s["Job"]["spec"]["template"]["metadata"]["labels"]
    worker_labels = k8s["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    assert sorted(components["values"]) == sorted(
        labels["app.kubernetes.io/component"] for labels in (pod_labels, job_labels, worker_labels))
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert "kafka-networkpolicy.yaml" not in kustomization["resources"]  # another namespace


def test_gateway_probes_and_drain(
    gateway_k8s: dict[str, dict[str, Any]],
    gateway_container: dict[str, Any],
    gateway_args: argparse.Namespace,
    configmap: dict[str, str],
) -> None:
    ports = {p["name"]: p["containerPort"] for p in gateway_container["ports"]}
    readiness, liveness = gateway_container["readinessProbe"], gateway_container["livenessProbe"]
    assert readiness["httpGet"]["path"] == "/ready"
    assert liveness["httpGet"]["path"] == "/metrics"  # a restarting reader is no reason to kill
    for probe in (readiness, liveness):
        assert ports[probe["httpGet"]["port"]] == gateway_args.metrics_port
    # the kubelet waits for the preStop pause, the drain and the last publish before it kills
    pod = gateway_k8s["Deployment"]["spec"]["template"]["spec"]
    command = gateway_container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] >= (
        int(command[1]) + gateway_args.drain_timeout_ms / 1000 + 5)
    assert pod["securityContext"]["runAsUser"] == dockerfile_uid()
    # settings from the ConfigMap (and the optional credentials Secret), as the workers
    sources = [next(iter(e.values()))["name"] for e in gateway_container["envFrom"]]
    assert sources == ["quota-streams-config", "quota-streams-kafka-credentials"]
    assert configmap["QS_EVENT_FORMAT"] == "columnar"
    assert gateway_k8s["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= (
        gateway_k8s["Deployment"]["spec"]["template"]["metadata"]["labels"].items())


async def test_the_gateways_probe_paths_are_served(gateway_container: dict[str, Any]) -> None:
    """The paths the probes ask are what the gateway's HTTP port serves (not a 404)."""
    import aiohttp
    from prometheus_client import CollectorRegistry

    from app.gateway.status import StatusServer

    server = StatusServer(CollectorRegistry(), lambda: {"ready": True})
    await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            for probe in ("readinessProbe", "livenessProbe"):
                path = gateway_container[probe]["httpGet"]["path"]
                async with http.get(f"http://127.0.0.1:{server.port}{path}") as answer:
                    assert answer.status == 200, path
    finally:
        await server.stop()


def test_prometheus_scrapes_the_gateways_metrics_port(
    prometheus: dict[str, Any],
    gateway_k8s: dict[str, dict[str, Any]],
    gateway_container: dict[str, Any],
) -> None:
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    job = jobs["quota-streams-gateway"]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod"
    assert sd["namespaces"]["names"] == [
        yaml.safe_load((K8S / "kustomization.yaml").read_text())["namespace"]]
    pod_labels = gateway_k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    kept = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"]
            if r.get("action") == "keep"}
    ((sources, regex),) = [(s, r) for s, r in kept.items() if "pod_label" in s[0]]
    assert re.fullmatch(regex, ";".join(_label_from_meta(s, pod_labels) for s in sources))
    assert not re.fullmatch(regex, "quota-streams;worker")
    port_regex = kept[("__meta_kubernetes_pod_container_port_name",)]
    assert [p["name"] for p in gateway_container["ports"]
            if re.fullmatch(port_regex, p["name"])] == ["metrics"]


def test_dashboard_shows_what_the_gateway_measures_and_throttles(
    dashboard: dict[str, Any],
) -> None:
    exprs = " ".join(t["expr"] for p in dashboard_panels(dashboard) for t in p["targets"])
    used = {base_metric(n) for n in metric_names(exprs)}
    for metric in ("throttle_ms_total", "throttled_responses_total", "muted_connections",
                   "added_latency_seconds", "closed_connections_total", "buffered_bytes",
                   "events_dropped_total", "open_connections", "requests_total",
                   "response_bytes_total"):
        assert f"quota_streams_gateway_{metric}" in used, metric
    latency = "quota_streams_gateway_added_latency_seconds_bucket"
    for q in ("0.5", "0.99"):
        assert re.search(rf"histogram_quantile\({q}, sum by \(le\) \(rate\({latency}", exprs), q
    assert re.search(r"sum by \(reason\) \(rate\(quota_streams_gateway_closed_connections_total",
                     exprs)
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "gateway" in variables


def test_compose_gateway_health_and_stop(compose: dict[str, Any]) -> None:
    """Its health is /ready on its metrics port; docker's SIGKILL waits for the drain."""
    from app.cli import build_parser

    gateway = compose["services"]["gateway"]
    args = build_parser().parse_args(gateway["command"])
    assert f"127.0.0.1:{args.metrics_port}/ready" in " ".join(gateway["healthcheck"]["test"])
    grace = int(gateway["stop_grace_period"].removesuffix("s"))
    assert grace >= args.drain_timeout_ms / 1000 + 5


# --------------------------------------------------------------------------- the scheduled audit


def audit_argv(cronjob: dict[str, Any], configmap: dict[str, str]) -> list[str]:
    """The CronJob's `quota-streams audit` command line, as its shell would run it at
    2026-11-28 01:30 UTC with the ConfigMap's environment."""
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    shell, flag, script = container["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    env = {**configmap, "PATH": "/usr/bin:/bin"}
    fake_date = ("date() { case \"$*\" in *'- 25 hours'*) echo 2026-11-27T00:00:00Z;; "
                 "*'- 1 hour'*) echo 2026-11-28T00:00:00Z;; *%H%MZ*) echo 2026-11-28T0130Z;; "
                 "*) echo 2026-11-28T01:00:00Z;; esac; }; ")
    script = fake_date + script.replace("exec quota-streams", "printf '%s\\n' quota-streams")
    done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True,
                          check=True)
    argv = done.stdout.splitlines()
    assert argv[0] == "quota-streams"
    return argv[1:]


def test_the_scheduled_audit_audits_the_last_day_as_the_workers_decided(
    k8s: dict[str, dict[str, Any]], configmap: dict[str, str]
) -> None:
    from app.cli import build_parser
    from app.commands.support import ENGINE_FLAGS, engine_settings
    from app.settings import load

    cronjob = k8s["CronJob"]
    argv = audit_argv(cronjob, configmap)
    args = build_parser().parse_args(argv)
    assert argv[0] == "audit"
    assert (args.time_from, args.time_to) == ("2026-11-27T00:00:00Z", "2026-11-28T00:00:00Z")
    assert args.input == ["kafka"] and args.master.startswith("local[")
    assert args.tolerance == "0" and not args.no_report
    # the engine's settings are the workers' (the same ConfigMap), every one of them, and in
    # allocations mode too: no flag of the command sets one
    for mode in ("directives", "allocations"):
        env = {**configmap, "QS_SCOPE": "cluster", "QS_CLUSTER_ENFORCEMENT": mode}
        assert engine_settings(args, env) == load(env).engine()
    assert not {flag for flag, _, _ in ENGINE_FLAGS} & set(argv)
    # the topics: the CLI's defaults are QS_TOPIC_*, which the ConfigMap gives the pod
    spec = cronjob["spec"]
    job = spec["jobTemplate"]["spec"]
    pod = job["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["concurrencyPolicy"] == "Forbid" and job["backoffLimit"] == 0
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"]
    assert container["image"].startswith("quota-streams-audit")
    # reports land on the volume, one directory per run
    (mount,) = container["volumeMounts"]
    assert args.out.startswith(mount["mountPath"] + "/")
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"]["claimName"] == k8s["PersistentVolumeClaim"][
        "metadata"]["name"]
    # read-only credentials of their own, not the workers'
    refs = container["envFrom"]
    assert {"configMapRef": {"name": k8s["ConfigMap"]["metadata"]["name"]}} in refs
    secrets = [r["secretRef"] for r in refs if "secretRef" in r]
    assert secrets == [{"name": "quota-streams-audit-credentials", "optional": True}]


def test_the_audit_image_installs_the_audit_extra() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile.audit").read_text().splitlines()]
    assert "RUN pip wheel --no-deps --wheel-dir /wheels ." in lines
    assert any("[audit]" in line and line.startswith("RUN pip install") for line in lines)
    assert any("jre" in line for line in lines)
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] == "10001"
    (entrypoint,) = [line for line in lines if line.startswith("ENTRYPOINT")]
    assert json.loads(entrypoint.removeprefix("ENTRYPOINT")) == ["quota-streams"]
