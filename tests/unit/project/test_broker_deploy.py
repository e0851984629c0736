"""The broker side of the broker plugin (deploy/broker-plugin/) against the code it configures.

What breaks there silently: a `quota.streams.*` property the plugin does not read (Kafka passes
any name through, and the plugin ignores what it does not know), a class the jar does not hold,
brokers and workers on different topics or windows, a KafkaUser without an ACL its code needs
(the plugin retries for ever and holds nothing), a worker setting the code does not read. The
plugin's side is read from its Java sources (Settings.java names every property), the workers'
from app.settings and app.pipeline.topology.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.settings import SETTINGS, load
from tests.unit.project.test_deploy import (
    K8S,
    ROOT,
    TopicsScript,
    assert_valid_settings,
    load_yaml_docs,
    needs_bash,
)

PLUGIN = ROOT / "deploy" / "broker-plugin"
JAVA = ROOT / "jvm" / "broker-plugin" / "src" / "main" / "java"
PACKAGE = JAVA / "io" / "quotastreams" / "broker"
DEFAULTS = {s.env: s.default for s in SETTINGS}
DEPLOYMENTS = ("strimzi", "selfmanaged")
#: what Strimzi refuses in spec.kafka.config (KafkaClusterSpec.FORBIDDEN_PREFIXES, KRaft)
STRIMZI_FORBIDDEN = (
    "listeners", "advertised.", "broker.", "listener.", "host.name", "port",
    "inter.broker.listener.name", "sasl.", "ssl.", "security.", "password.", "log.dir",
    "zookeeper.connect", "zookeeper.set.acl", "zookeeper.ssl", "zookeeper.clientCnxnSocket",
    "authorizer.", "super.user", "cruise.control.metrics.topic",
    "cruise.control.metrics.reporter.bootstrap.servers", "node.id", "process.roles",
    "controller.", "metadata.log.dir", "zookeeper.metadata.migration.enable",
)
#: an ACL operation Kafka's authorizer also allows when another is granted
IMPLIED = {"Describe": {"Read", "Write", "Delete", "Alter"}, "DescribeConfigs": {"AlterConfigs"}}


# --------------------------------------------------------------------------- the plugin's code


@dataclass
class JavaSettings:
    """The properties Settings.java reads: names, name prefixes, defaults, required ones and
    integer bounds given as literals."""

    names: set[str] = field(default_factory=set)
    prefixes: set[str] = field(default_factory=set)
    defaults: dict[str, str] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)

    def reads(self, name: str) -> bool:
        return name in self.names or any(name.startswith(p) for p in self.prefixes)


def java_int(text: str) -> int | None:
    literal = text.strip().replace("_", "").removesuffix("L")
    return int(literal) if re.fullmatch(r"-?\d+", literal) else None


def java_settings(source: str | None = None) -> JavaSettings:
    src = source if source is not None else (PACKAGE / "Settings.java").read_text()
    (prefix,) = re.findall(r'String PREFIX = "([\w.]+)";', src)
    found = JavaSettings()
    for name in re.findall(r'PREFIX \+ "([\w.]+)"', src):
        (found.prefixes if name.endswith(".") else found.names).add(prefix + name)
    for name, fallback in re.findall(
            r'text\(configs, PREFIX \+ "([\w.]+)", ("[^"]*"|\w+\(configs\))\)', src):
        if fallback.startswith('"'):
            found.defaults[prefix + name] = fallback.strip('"')
    for name, least, most, fallback in re.findall(
            r'number\(configs\.get\(PREFIX \+ "([\w.]+)"\), PREFIX \+ "\1", ([^,]+), ([^,]+), '
            r"([^)]+)\)", src):
        if java_int(fallback) == -1:
            found.required.add(prefix + name)
        else:
            found.defaults[prefix + name] = str(java_int(fallback))
        low, high = java_int(least), java_int(most)
        if low is not None and high is not None:
            found.bounds[prefix + name] = (low, high)
    return found


def java_class(name: str) -> str:
    """The source of a class of the plugin, by its full name ('' when there is none)."""
    package, _, simple = name.rpartition(".")
    path = JAVA.joinpath(*package.split("."), f"{simple}.java")
    if not path.is_file():
        return ""
    source = path.read_text()
    return source if f"package {package};" in source else ""


def implements(source: str, simple: str, interface: str) -> bool:
    return bool(re.search(rf"\bclass {simple}\b[^{{]*\bimplements\b[^{{]*\b{interface}\b", source))


def client_config_overrides() -> set[str]:
    """The client configs the plugin's code sets (or removes) after it copied
    quota.streams.client.*: setting them in the broker's properties would do nothing."""
    names = set()
    for java in ("Follower.java", "UsageReporter.java"):
        for const in re.findall(r"config\.(?:put|remove)\(\w+Config\.(\w+)_CONFIG",
                                (PACKAGE / java).read_text()):
            names.add(const.lower().replace("_", "."))
    return names


def test_the_plugins_settings_are_read_from_its_source() -> None:
    """The parser itself, on Settings.java and on a made-up source."""
    settings = java_settings()
    assert "quota.streams.brokers" in settings.required
    assert settings.defaults["quota.streams.control.topic"] == "quota.directives"
    assert settings.defaults["quota.streams.usage.interval.ms"] == "1000"
    assert settings.bounds["quota.streams.brokers"] == (1, 100_000)
    assert settings.prefixes == {"quota.streams.client."}
    assert "quota.streams.bootstrap.servers" in settings.names
    assert "quota.streams.bootstrap.servers" not in settings.defaults  # the broker's listener
    made_up = ('String PREFIX = "x.";\ntext(configs, PREFIX + "a", "b")\n'
               'number(configs.get(PREFIX + "n"), PREFIX + "n", 2, 9, -1)\n')
    assert java_settings(made_up) == JavaSettings(
        names={"x.a", "x.n"}, defaults={"x.a": "b"}, required={"x.n"}, bounds={"x.n": (2, 9)})
    assert {"bootstrap.servers", "client.id", "group.id"} <= client_config_overrides()


# --------------------------------------------------------------------------- the deployment


def properties(text: str) -> dict[str, str]:
    """A Java properties file of `key=value` lines (no continuation lines)."""
    result = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        assert not line.endswith("\\"), line
        key, _, value = line.partition("=")
        result[key.strip()] = value.strip()
    return result


def docs_by_kind(*paths: Path) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        for doc in load_yaml_docs(path):
            found.setdefault(doc["kind"], []).append(doc)
    return found


def strimzi() -> dict[str, list[dict[str, Any]]]:
    """The objects of strimzi/'s resource files (its ../metrics directory builds a ConfigMap)."""
    kustomization = yaml.safe_load((PLUGIN / "strimzi" / "kustomization.yaml").read_text())
    files = [PLUGIN / "strimzi" / r for r in kustomization["resources"]]
    return docs_by_kind(*(f for f in files if f.is_file()))


def selfmanaged() -> dict[str, list[dict[str, Any]]]:
    return docs_by_kind(PLUGIN / "selfmanaged" / "kafka.yaml")


def strimzi_config() -> dict[str, str]:
    (kafka,) = strimzi()["Kafka"]
    config = kafka["spec"]["kafka"]["config"]
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in config.items()}


def selfmanaged_config() -> dict[str, str]:
    (configmap,) = selfmanaged()["ConfigMap"]
    return properties(configmap["data"]["server.properties"])


def broker_config(deployment: str) -> dict[str, str]:
    return strimzi_config() if deployment == "strimzi" else selfmanaged_config()


def broker_count(deployment: str) -> int:
    if deployment == "strimzi":
        return sum(p["spec"]["replicas"] for p in strimzi()["KafkaNodePool"]
                   if "broker" in p["spec"]["roles"])
    (sts,) = selfmanaged()["StatefulSet"]
    return int(sts["spec"]["replicas"])


def selfmanaged_container() -> dict[str, Any]:
    (sts,) = selfmanaged()["StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return container


def configmap_patch(path: Path) -> dict[str, str]:
    (patch,) = load_yaml_docs(path)
    assert (patch["kind"], patch["metadata"]["name"]) == ("ConfigMap", "quota-streams-config")
    return {k: str(v) for k, v in patch["data"].items()}


def allocations_patch() -> dict[str, str]:
    """What the workers change beside any brokers running the plugin (workers/)."""
    return configmap_patch(PLUGIN / "workers" / "configmap.yaml")


def connection_patch(deployment: str) -> dict[str, str]:
    """How the workers reach one deployment's brokers (<deployment>/workers/)."""
    return configmap_patch(PLUGIN / deployment / "workers" / "connection.yaml")


def workers_env(deployment: str) -> dict[str, str]:
    """The workers' ConfigMap beside one deployment's brokers: deploy/k8s's, then the
    allocations layer's patch, then the deployment's."""
    (base,) = [d for d in load_yaml_docs(K8S / "configmap.yaml") if d["kind"] == "ConfigMap"]
    return {**{k: str(v) for k, v in base["data"].items()}, **allocations_patch(),
            **connection_patch(deployment)}


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_every_plugin_property_is_one_the_plugin_reads(deployment: str) -> None:
    settings = java_settings()
    config = broker_config(deployment)
    ours = {k: v for k, v in config.items() if k.startswith("quota.streams.")}
    unread = sorted(k for k in ours if not settings.reads(k))
    assert not unread, f"{deployment}: the plugin reads no {unread}"
    missing = settings.required - set(ours)
    assert not missing, f"{deployment}: the plugin needs {sorted(missing)}"
    for name, (least, most) in settings.bounds.items():
        if name in ours:
            assert least <= int(ours[name]) <= most, (deployment, name)
    overridden = {k.removeprefix("quota.streams.client.") for k in ours
                  if k.startswith("quota.streams.client.")} & client_config_overrides()
    assert not overridden, f"{deployment}: the plugin's code sets {overridden} itself"
    assert ours["quota.streams.scope"] in ("cluster", "broker")


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_the_callback_and_the_reporter_are_the_plugins_classes(deployment: str) -> None:
    config = broker_config(deployment)
    callback = config["client.quota.callback.class"]
    assert implements(java_class(callback), callback.rpartition(".")[2], "ClientQuotaCallback"), (
        f"{callback} is no ClientQuotaCallback of jvm/broker-plugin")
    reporters = [r.strip() for r in config["metric.reporters"].split(",")]
    # Kafka 4's default reporter is JmxReporter alone: a list without it loses JMX metrics
    assert "org.apache.kafka.common.metrics.JmxReporter" in reporters
    ours = [r for r in reporters if r.startswith("io.quotastreams.")]
    assert ours == ["io.quotastreams.broker.UsageReporter"]
    for reporter in ours:
        assert implements(java_class(reporter), reporter.rpartition(".")[2], "MetricsReporter"), (
            f"{reporter} is no MetricsReporter of jvm/broker-plugin")


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_kafkas_quota_windows_are_untouched_and_are_the_workers_window(deployment: str) -> None:
    config = broker_config(deployment)
    windows = [k for k in config if "quota.window." in k]
    assert not windows, f"{deployment} changes Kafka's quota windows: {windows}"
    env = workers_env(deployment)
    kafka_default_window_ms = 11 * 1000  # quota.window.num x quota.window.size.seconds
    assert int(env["QS_ENFORCER_WINDOW_MS"]) == kafka_default_window_ms
    assert int(env["QS_QUOTA_WINDOW_NUM"]) * int(env["QS_QUOTA_WINDOW_SIZE_MS"]) == (
        kafka_default_window_ms)


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_brokers_and_workers_name_the_same_topics(deployment: str) -> None:
    """The plugin's topics (or its defaults) are the workers' (or app.settings' defaults)."""
    defaults = java_settings().defaults
    config = broker_config(deployment)
    env = workers_env(deployment)
    for prop, setting in (("quota.streams.control.topic", "QS_TOPIC_DIRECTIVES"),
                          ("quota.streams.config.topic", "QS_TOPIC_CONFIGS"),
                          ("quota.streams.request.topic", "QS_TOPIC_REQUEST")):
        assert defaults[prop] == DEFAULTS[setting], f"the plugin's {prop} is not {setting}'s"
        broker = config.get(prop, defaults[prop])
        assert broker == env.get(setting, DEFAULTS[setting]), (deployment, prop, setting)
        assert setting in allocations_patch(), f"workers/configmap.yaml should name {setting}"
    assert config.get("quota.streams.scope", defaults["quota.streams.scope"]) == env["QS_SCOPE"]
    assert int(config["quota.streams.brokers"]) == broker_count(deployment)
    # a usage record must not create the request topic with the broker's defaults
    assert config["auto.create.topics.enable"] == "false"


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_the_workers_configmap_holds_settings_in_allocations_mode(deployment: str) -> None:
    assert_valid_settings(allocations_patch(), "workers/configmap.yaml", complete=False)
    assert_valid_settings(connection_patch(deployment), f"{deployment}/workers/connection.yaml",
                          complete=False)
    assert not set(allocations_patch()) & set(connection_patch(deployment))
    env = workers_env(deployment)
    assert_valid_settings(env, f"the workers' ConfigMap beside {deployment}", complete=True)
    assert (env["QS_SCOPE"], env["QS_CLUSTER_ENFORCEMENT"]) == ("cluster", "allocations")
    assert load(env).engine().allocations


# --------------------------------------------------------------------------- ACLs


@dataclass(frozen=True)
class Need:
    """An operation a component's code performs on a resource."""

    resource: str  # topic, group
    name: str
    operation: str


def allowed(user: dict[str, Any], need: Need) -> bool:
    """Whether a KafkaUser's simple ACLs allow `need` (literal and prefixed names, `*`, All and
    the operations Kafka implies)."""
    for acl in user["spec"]["authorization"]["acls"]:
        resource = acl["resource"]
        if resource["type"] != need.resource or acl.get("type", "allow") != "allow":
            continue
        name, pattern = resource.get("name", "*"), resource.get("patternType", "literal")
        if not (name == "*" or (pattern == "literal" and name == need.name)
                or (pattern == "prefix" and need.name.startswith(name))):
            continue
        operations = set(acl["operations"])
        if need.operation in operations or "All" in operations or (
                operations & IMPLIED.get(need.operation, set())):
            return True
    return False


def test_acl_evaluation() -> None:
    user = {"spec": {"authorization": {"acls": [
        {"resource": {"type": "topic", "name": "a", "patternType": "literal"},
         "operations": ["Read"]},
        {"resource": {"type": "topic", "name": "p-", "patternType": "prefix"},
         "operations": ["Create"]}]}}}
    assert allowed(user, Need("topic", "a", "Read"))
    assert allowed(user, Need("topic", "a", "Describe"))  # implied by Read
    assert not allowed(user, Need("topic", "a", "Write"))
    assert not allowed(user, Need("topic", "ab", "Read"))
    assert allowed(user, Need("topic", "p-x", "Create"))
    assert not allowed(user, Need("group", "a", "Read"))


def users() -> dict[str, dict[str, Any]]:
    return {u["metadata"]["name"]: u for u in strimzi()["KafkaUser"]}


def plugin_needs(config: dict[str, str]) -> list[Need]:
    """What the plugin's code does, as read in it: two group-less readers (assign, no group.id)
    of the control and config topics, one producer (no transactional.id) to the request topic,
    and no admin client."""
    follower = (PACKAGE / "Follower.java").read_text()
    assert ".assign(" in follower and ".subscribe(" not in follower
    assert "config.remove(ConsumerConfig.GROUP_ID_CONFIG)" in follower
    sources = "".join(p.read_text() for p in PACKAGE.glob("*.java"))
    assert "TRANSACTIONAL_ID" not in sources
    assert "org.apache.kafka.clients.admin" not in sources
    defaults = java_settings().defaults

    def topic(name: str) -> str:
        return config.get(f"quota.streams.{name}.topic", defaults[f"quota.streams.{name}.topic"])

    reads = [Need("topic", topic(t), op) for t in ("control", "config")
             for op in ("Read", "Describe")]
    return reads + [Need("topic", topic("request"), op) for op in ("Write", "Describe")]


def worker_needs(env: dict[str, str]) -> list[Need]:
    """The workers: the event and config topics read, directives and dead letters written, and
    their own: the consumer group QS_APP_ID and the topics named after it, declared at start."""
    from app.pipeline.topology import topic_specs

    app = env["QS_APP_ID"]
    read = [env[f"QS_TOPIC_{k}"] for k in ("REQUEST", "CONNECTION", "MUTATION", "CONFIGS")]
    write = [env["QS_TOPIC_DIRECTIVES"], env["QS_TOPIC_DEADLETTER"]]
    own = [name for name, _, _ in topic_specs(load(env)) if name.startswith(f"{app}-")]
    assert len(own) == 2
    own.append(f"{app}-__assignor-__leader")  # Faust's
    return ([Need("topic", t, op) for t in read for op in ("Read", "Describe")]
            + [Need("topic", t, op) for t in write for op in ("Write", "Describe")]
            + [Need("topic", t, op) for t in own for op in ("Read", "Write", "Describe", "Create")]
            + [Need("group", app, "Read")])


def test_the_kafka_users_grant_what_the_code_needs() -> None:
    every = users()
    env = workers_env("strimzi")
    needs = {
        "quota-streams-plugin": plugin_needs(strimzi_config()),
        "quota-streams-workers": worker_needs(env),
        "quota-streams-audit": [
            Need("topic", env[f"QS_TOPIC_{k}"], "Read")
            for k in ("REQUEST", "CONNECTION", "MUTATION", "CONFIGS", "DIRECTIVES")],
        "quota-streams-admin": [Need("topic", env["QS_TOPIC_CONFIGS"], "Write")],
    }
    assert set(every) == set(needs)
    for name, user in every.items():
        assert user["metadata"]["labels"]["strimzi.io/cluster"] == "kafka"
        assert user["spec"]["authentication"]["type"] == "scram-sha-512"
        lacking = [n for n in needs[name] if not allowed(user, n)]
        assert not lacking, f"{name} lacks {lacking}"
        for acl in user["spec"]["authorization"]["acls"]:
            assert "All" not in acl["operations"], name
            assert acl["resource"]["type"] in ("topic", "group"), name
    # whoever writes the control topic throttles anyone: the workers only
    control = Need("topic", env["QS_TOPIC_DIRECTIVES"], "Write")
    assert [n for n, u in every.items() if allowed(u, control)] == ["quota-streams-workers"]
    # the plugin reads without a consumer group
    assert not [a for a in every["quota-streams-plugin"]["spec"]["authorization"]["acls"]
                if a["resource"]["type"] == "group"]


def test_the_clients_are_the_kafka_users() -> None:
    """The plugin's and the workers' SASL users are the KafkaUsers, and the plugin's password
    is the Secret its KafkaUser takes it from."""
    config = strimzi_config()
    every = users()
    (username,) = re.findall(r'username="([^"]+)"', config["quota.streams.client.sasl.jaas.config"])
    assert username in every
    (password_env,) = re.findall(r'password="\$\{strimzienv:(\w+)\}"',
                                 config["quota.streams.client.sasl.jaas.config"])
    (kafka,) = strimzi()["Kafka"]
    env = {e["name"]: e for e in kafka["spec"]["kafka"]["template"]["kafkaContainer"]["env"]}
    assert env[password_env]["valueFrom"]["secretKeyRef"] == (
        every[username]["spec"]["authentication"]["password"]["valueFrom"]["secretKeyRef"])
    assert workers_env("strimzi")["KAFKA_SASL_USERNAME"] in every


# --------------------------------------------------------------------------- connections


def test_the_strimzi_plugin_connects_to_a_listener_with_credentials() -> None:
    config = strimzi_config()
    (kafka,) = strimzi()["Kafka"]
    cluster, namespace = kafka["metadata"]["name"], "kafka"
    assert yaml.safe_load((PLUGIN / "strimzi" / "kustomization.yaml").read_text())[
        "namespace"] == namespace
    spec = kafka["spec"]["kafka"]
    assert "quotas" not in spec, "Strimzi's quotas plugin would be the callback"
    forbidden = [k for k in spec["config"] if k.startswith(STRIMZI_FORBIDDEN)]
    assert not forbidden, f"Strimzi refuses {forbidden}"
    # the bootstrap is one of the cluster's listeners, with its protocol and mechanism
    host, port = config["quota.streams.bootstrap.servers"].split(":")
    assert host == f"{cluster}-kafka-bootstrap.{namespace}.svc"
    listeners = [li for li in spec["listeners"] if li["port"] == int(port)]
    assert len(listeners) == 1, f"the cluster has no listener on {port}"
    (listener,) = listeners
    assert listener["authentication"]["type"] == "scram-sha-512"
    protocol = "SASL_SSL" if listener["tls"] else "SASL_PLAINTEXT"
    assert config["quota.streams.client.security.protocol"] == protocol
    assert config["quota.streams.client.sasl.mechanism"] == "SCRAM-SHA-512"
    assert spec["authorization"]["type"] == "simple"  # the KafkaUsers' ACLs hold
    # every placeholder has its source: an env var of the container, the cluster's CA
    env = {e["name"] for e in spec["template"]["kafkaContainer"]["env"]}
    for value in config.values():
        for name in re.findall(r"\$\{strimzienv:(\w+)\}", value):
            assert name in env, name
        for secret in re.findall(r"\$\{strimzisecrets:([^:}]+):", value):
            assert secret == f"{namespace}/{cluster}-cluster-ca-cert", secret
    assert "${strimzisecrets:" in config["quota.streams.client.ssl.truststore.certificates"]
    # the workers connect to the same listener the same way
    workers = workers_env("strimzi")
    assert workers["KAFKA_BOOTSTRAP_SERVERS"] == config["quota.streams.bootstrap.servers"]
    assert workers["KAFKA_SECURITY_PROTOCOL"] == protocol
    assert workers["KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"


def test_the_selfmanaged_plugin_connects_to_its_brokers_own_listener() -> None:
    """No quota.streams.bootstrap.servers: the plugin takes the broker's inter-broker listener
    at its advertised address (Settings.ownListener), which needs no credentials here."""
    config = selfmanaged_config()
    assert "quota.streams.bootstrap.servers" not in config
    assert not [k for k in config if k.startswith("quota.streams.client.")]
    name = config.get("inter.broker.listener.name", "PLAINTEXT")
    protocols = dict(e.split(":") for e in config["listener.security.protocol.map"].split(","))
    assert protocols[name] == "PLAINTEXT"
    script = selfmanaged_container()["command"][-1]
    (advertised,) = re.findall(r"advertised\.listeners=([^\\\n']+)", script)
    assert [a for a in advertised.split(",") if a.split("://")[0] == name], advertised
    # the env provider resolves what the properties take from the environment
    assert config["config.providers"] == "env"
    env = {e["name"] for e in selfmanaged_container()["env"]}
    for value in config.values():
        for var in re.findall(r"\$\{env:(\w+)\}", value):
            assert var in env, var
    # every node is a voter and a broker
    voters = config["controller.quorum.voters"].split(",")
    assert len(voters) == broker_count("selfmanaged")
    assert set(config["process.roles"].split(",")) == {"broker", "controller"}
    # the workers bootstrap at the Service of the client listener, in its protocol
    workers = workers_env("selfmanaged")
    kustomization = yaml.safe_load((PLUGIN / "selfmanaged" / "kustomization.yaml").read_text())
    services = {s["metadata"]["name"]: s for s in selfmanaged()["Service"]
                if s["spec"].get("clusterIP") != "None"}
    host, port = workers["KAFKA_BOOTSTRAP_SERVERS"].split(":")
    service, namespace, svc = host.split(".")
    assert (namespace, svc) == (kustomization["namespace"], "svc")
    assert int(port) in [p["port"] for p in services[service]["spec"]["ports"]]
    (client,) = [li for li in config["listeners"].split(",") if li.endswith(f":{port}")]
    assert workers["KAFKA_SECURITY_PROTOCOL"] == protocols[client.split("://")[0]]


# --------------------------------------------------------------------------- images


def kafka_version() -> str:
    (version,) = re.findall(r"<kafka.version>([\d.]+)</kafka.version>",
                            (ROOT / "jvm" / "pom.xml").read_text())
    return version


def test_the_images_carry_the_jar_for_the_plugins_kafka_version() -> None:
    version = kafka_version()
    lines = [line.strip() for line in (PLUGIN / "Dockerfile").read_text().splitlines()]
    (base,) = [line.split("=", 1)[1] for line in lines if line.startswith("ARG KAFKA_IMAGE=")]
    assert re.fullmatch(rf"quay\.io/strimzi/kafka:[\d.]+-kafka-{re.escape(version)}", base), base
    assert "FROM ${KAFKA_IMAGE}" in lines
    (copy,) = [line.split() for line in lines if line.startswith("COPY ")]
    (final_name,) = re.findall(r"<finalName>([\w.-]+)</finalName>",
                               (ROOT / "jvm" / "broker-plugin" / "pom.xml").read_text())
    assert copy[-2:] == [f"jvm/broker-plugin/target/{final_name}.jar", "/opt/kafka/libs/"]
    # Strimzi's cluster runs the image built on the default base, of the same Kafka
    (kafka,) = strimzi()["Kafka"]
    assert str(kafka["spec"]["kafka"]["version"]) == version
    assert kafka["spec"]["kafka"]["image"].rpartition(":")[2] == base.rpartition(":")[2]
    # the self-managed one the image built on apache/kafka of that version
    assert f"--build-arg KAFKA_IMAGE=apache/kafka:{version}" in "".join(lines)
    assert selfmanaged_container()["image"].rpartition(":")[2] == version


# --------------------------------------------------------------------------- topics


@needs_bash
def test_the_topic_operator_creates_the_workers_topics(tmp_path: Path) -> None:
    """Strimzi's KafkaTopics are app.pipeline.topology's topics (names, partitions, configs),
    with the retention deploy/k8s/create-topics.sh gives them."""
    from app.pipeline.topology import topic_specs

    env = workers_env("strimzi")
    topics = {t["metadata"]["name"]: t["spec"] for t in strimzi()["KafkaTopic"]}
    specs = topic_specs(load(env))
    assert set(topics) == {name for name, _, _ in specs}
    script = TopicsScript(tmp_path, env)
    script.describe({name: partitions for name, partitions, _ in specs})
    assert script.run("create", "3").returncode == 0
    created = script.created()
    for name, partitions, configs in specs:
        topic = topics[name]
        assert topic["partitions"] == partitions, name
        assert topic["replicas"] == created[name][2], name
        config = {k: str(v) for k, v in topic["config"].items()}
        assert (configs or {}).items() <= config.items(), name
        for key in ("cleanup.policy", "retention.ms"):
            assert config.get(key) == created[name][1].get(key), (name, key)


# --------------------------------------------------------------------------- the workers' overlays


def kustomization(directory: Path) -> dict[str, Any]:
    return yaml.safe_load((directory / "kustomization.yaml").read_text())


def base_objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for r in kustomization(K8S)["resources"]
            for d in load_yaml_docs(K8S / r)}


def patch_targets(directory: Path) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The objects an overlay's patches change, and those it deletes."""
    changed, deleted = set(), set()
    for patch in kustomization(directory)["patches"]:
        if "target" in patch:
            targets = {(patch["target"]["kind"], patch["target"]["name"])}
        else:
            targets = {(d["kind"], d["metadata"]["name"])
                       for d in load_yaml_docs(directory / patch["path"])}
        if "$patch: delete" in patch.get("patch", ""):
            deleted |= targets
        else:
            changed |= targets
    return changed, deleted


def test_the_workers_overlays_patch_what_deploy_k8s_holds() -> None:
    """workers/ takes deploy/k8s, each deployment's overlay takes workers/, and
    each patch names an object still there; the gateways go, the topics Job only where its
    script cannot authenticate; the audit is deploy/k8s's (the ConfigMap gives it allocations)."""
    base = base_objects()
    assert kustomization(PLUGIN / "workers")["resources"] == ["../../k8s"]
    changed, deleted = patch_targets(PLUGIN / "workers")
    assert deleted == {(kind, name) for kind, name in base if name == "quota-streams-gateway"}
    assert changed <= set(base) - deleted
    assert ("CronJob", "quota-streams-audit") not in changed
    remaining = set(base) - deleted
    for deployment in DEPLOYMENTS:
        directory = PLUGIN / deployment / "workers"
        assert kustomization(directory)["resources"] == ["../../workers"]
        changed, deleted = patch_targets(directory)
        assert (changed | deleted) <= remaining, (deployment, (changed | deleted) - remaining)
        authenticates = connection_patch(deployment)["KAFKA_SECURITY_PROTOCOL"].startswith("SASL")
        assert deleted == ({("Job", "quota-streams-topics")} if authenticates else set())


# --------------------------------------------------------------------------- metrics


def java_gauges() -> set[tuple[str, str]]:
    """(group, name) of every gauge the plugin registers (`m.gauge(PluginMetrics.GROUP, "name"`)."""
    groups = dict(re.findall(r'static final String (\w+) = "([\w.-]+)";',
                             java_class("io.quotastreams.broker.PluginMetrics")))
    found = set()
    for path in sorted((ROOT / "jvm" / "broker-plugin" / "src" / "main").rglob("*.java")):
        for group, name in re.findall(r'gauge\(PluginMetrics\.(\w+),\s*"([\w-]+)"',
                                      path.read_text()):
            found.add((groups[group], name))
    return found


def exporter_rules() -> list[dict[str, Any]]:
    text = (PLUGIN / "metrics" / "jmx-exporter.yaml").read_text()
    return list(yaml.safe_load(text)["rules"])


def test_every_plugin_metric_has_an_exporter_rule_and_every_rule_a_metric() -> None:
    """A gauge without a rule is never scraped; a rule without a gauge is an empty panel. A
    bean is DOMAIN:type=GROUP[,tags], its attribute the metric (PluginMetrics.java)."""
    domain = dict(re.findall(r'static final String (\w+) = "([\w.-]+)";',
                             java_class("io.quotastreams.broker.PluginMetrics")))["DOMAIN"]
    gauges = java_gauges()
    assert {name for _, name in gauges} >= {"allocations-in-force", "allocations-fail-safe",
                                            "records-total", "usage-records-dropped-total",
                                            "usage-records-written-total"}
    matched: set[tuple[str, str]] = set()
    for rule in exporter_rules():
        bean = re.fullmatch(r"(.+?)<type=(\w+)(.*?)><>(.+)", rule["pattern"])
        assert bean, rule["pattern"]
        assert bean.group(1).replace("\\.", ".") == domain, rule["pattern"]
        key = (bean.group(2), bean.group(4))
        assert key in gauges, (rule["pattern"], sorted(gauges))
        assert rule["name"].startswith("quota_streams_plugin_")
        assert rule["type"] == ("COUNTER" if key[1].endswith("-total") else "GAUGE")
        matched.add(key)
    assert matched == gauges, gauges - matched


def test_a_followers_bean_is_matched_by_its_rule_with_its_labels() -> None:
    """The tags' order is the bean's key order (Follower.java puts follower, then outcome)."""
    (rule,) = [r for r in exporter_rules() if "type=follower" in r["pattern"]]
    bean = "io.quotastreams.broker<type=follower, follower=control, outcome=bad.unsigned><>records-total"
    found = re.fullmatch(rule["pattern"], bean)
    assert found and rule["labels"] == {"follower": "$1", "outcome": "$2"}
    assert (found.group(1), found.group(2)) == ("control", "bad.unsigned")
    source = java_class("io.quotastreams.broker.Follower")
    assert re.search(r'tags\("follower", name, "outcome", outcome\)', source)


def test_the_strimzi_brokers_run_the_exporter_with_the_plugins_rules() -> None:
    (kafka,) = strimzi()["Kafka"]
    ref = kafka["spec"]["kafka"]["metricsConfig"]["valueFrom"]["configMapKeyRef"]
    generated = kustomization(PLUGIN / "metrics")["configMapGenerator"]
    assert [(g["name"], g["files"]) for g in generated] == [(ref["name"], [ref["key"]])]
    assert "../metrics" in kustomization(PLUGIN / "strimzi")["resources"]
