#!/usr/bin/env bash
# Create (or check) every topic quota-streams reads or writes, with explicit partition counts.
#
# Used by the `topics` service of docker-compose.yml and by the Kubernetes Job and init container
# (deploy/k8s/), always inside the apache/kafka image, whose kafka-topics.sh it calls.
#
#   create-topics.sh create REPLICATION_FACTOR   create what is missing, then check
#   create-topics.sh check                        only check (exit 1 if anything is off)
#
# Topic names and partition counts come from the same environment variables the workers read
# (app/settings.py); the deployment sets all of them, so no default is repeated here. The list
# mirrors app/pipeline/topology.py:topic_specs (names, partition counts, compaction), which the
# workers also create at start on the embedded broker; tests/unit/project/test_deploy.py runs this
# script against a fake kafka-topics.sh and compares. What this script adds: the replication
# factor (the workers would create replication 1), min.insync.replicas and retention.
#
# Nothing is created implicitly: the broker must run with auto.create.topics.enable=false, since
# a topic auto-created with another partition count makes Faust crash-loop (PartitionsMismatch).
set -euo pipefail

: "${KAFKA_BOOTSTRAP_SERVERS:?must name the Kafka cluster}"
: "${QS_APP_ID:?}" "${QS_PARTITIONS:?}"
: "${QS_TOPIC_REQUEST:?}" "${QS_TOPIC_CONNECTION:?}" "${QS_TOPIC_MUTATION:?}"
: "${QS_TOPIC_CONFIGS:?}" "${QS_TOPIC_DIRECTIVES:?}" "${QS_TOPIC_DEADLETTER:?}"

KT=/opt/kafka/bin/kafka-topics.sh
mode=${1:?usage: create-topics.sh create REPLICATION_FACTOR | check}
shift
rf=1
if [ "$mode" = create ]; then
  rf=${1:?replication factor}
  shift
fi

DAY_MS=86400000
P=$QS_PARTITIONS
# name|partitions|--config flags (one topic a line). Retention: events and dead letters are kept
# 30 days for audit replay. Directives matter only until their `until` (seconds; hours at most
# for a large mutation-quota debt) and a broker rebuilds its active set by reading the topic, so
# plain deletion after a day. Directives are not compacted: the contract keys them by entity, and
# compaction would keep one of several directives (other quotas) for the same entity.
topics=(
  "$QS_TOPIC_REQUEST|$P|cleanup.policy=delete retention.ms=$((30 * DAY_MS))"
  "$QS_TOPIC_CONNECTION|$P|cleanup.policy=delete retention.ms=$((30 * DAY_MS))"
  "$QS_TOPIC_MUTATION|$P|cleanup.policy=delete retention.ms=$((30 * DAY_MS))"
  "$QS_TOPIC_CONFIGS|1|cleanup.policy=compact"
  "$QS_TOPIC_DIRECTIVES|$P|cleanup.policy=delete retention.ms=$DAY_MS"
  "$QS_TOPIC_DEADLETTER|1|cleanup.policy=delete retention.ms=$((30 * DAY_MS))"
  # events re-keyed by resolved quota entity (the workers' internal topic)
  "$QS_APP_ID-samples|$P|cleanup.policy=delete retention.ms=$DAY_MS"
  # changelog of the Faust table `entity-windows` (tables/entity_state.py)
  "$QS_APP_ID-entity-windows-changelog|$P|cleanup.policy=compact"
)

if [ "$mode" = create ]; then
  for entry in "${topics[@]}"; do
    IFS='|' read -r name partitions configs <<< "$entry"
    args=(--create --if-not-exists --topic "$name" --partitions "$partitions"
          --replication-factor "$rf")
    for cfg in $configs; do args+=(--config "$cfg"); done
    if [ "$rf" -ge 3 ]; then args+=(--config min.insync.replicas=2); fi
    echo "create $name (partitions=$partitions, replication=$rf, $configs)"
    "$KT" --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" "${args[@]}"
  done
elif [ "$mode" != check ]; then
  echo "unknown mode $mode (create or check)" >&2
  exit 2
fi

# Check: every topic exists with exactly its partition count (an existing topic with another
# count is not changed by --if-not-exists, and the workers would not start on it).
described=$("$KT" --bootstrap-server "$KAFKA_BOOTSTRAP_SERVERS" --describe)
status=0
for entry in "${topics[@]}"; do
  IFS='|' read -r name partitions _ <<< "$entry"
  count=$(printf '%s\n' "$described" \
    | awk -v t="$name" '$1 == "Topic:" && $2 == t { for (i = 1; i < NF; i++) if ($i == "PartitionCount:") print $(i + 1) }')
  if [ -z "$count" ]; then
    echo "MISSING $name" >&2
    status=1
  elif [ "$count" != "$partitions" ]; then
    echo "WRONG $name has $count partitions, expected $partitions" >&2
    status=1
  else
    echo "ok $name ($count partitions)"
  fi
done
exit "$status"
