package io.quotastreams.broker;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.server.quota.ClientQuotaEntity;
import org.apache.kafka.server.quota.ClientQuotaType;

/**
 * The client quotas configured in Kafka itself (kafka-configs, the Admin API), held per broker
 * with Kafka's rules: a broker that loads a quota callback no longer runs Kafka's own one, so
 * without this its request-time and mutation quotas, and every byte rate the workers do not
 * allocate, would go unenforced. Resolution follows Kafka's order of precedence: user and client
 * id, user and default client id, user, default user and client id, default user and default
 * client id, default user, client id, default client id.
 */
public final class KafkaQuotas {
    /** An entity part: a name, {@link #DEFAULT}, or absent (null). */
    private record Entity(String user, String clientId) {}

    static final String DEFAULT = "\u0000default";

    private final Map<ClientQuotaType, Map<Entity, Double>> quotas = new ConcurrentHashMap<>();
    private final AtomicLong version = new AtomicLong();

    private static Entity entity(ClientQuotaEntity entity) {
        String user = null;
        String clientId = null;
        for (ClientQuotaEntity.ConfigEntity part : entity.configEntities()) {
            switch (part.entityType()) {
                case USER -> user = part.name();
                case DEFAULT_USER -> user = DEFAULT;
                case CLIENT_ID -> clientId = part.name();
                case DEFAULT_CLIENT_ID -> clientId = DEFAULT;
                default -> { }
            }
        }
        return new Entity(user, clientId);
    }

    public void update(ClientQuotaType type, ClientQuotaEntity entity, double value) {
        Entity e = entity(entity);
        update(type, e.user(), e.clientId(), value);
    }

    public void remove(ClientQuotaType type, ClientQuotaEntity entity) {
        Entity e = entity(entity);
        update(type, e.user(), e.clientId(), null);
    }

    /**
     * Set ({@code value}) or remove (null) the quota of an entity: {@code user} and {@code
     * clientId} null where the entity has no such part, {@link #DEFAULT} for the default one.
     */
    public void update(ClientQuotaType type, String user, String clientId, Double value) {
        Entity e = new Entity(user, clientId);
        if (value == null) {
            Map<Entity, Double> held = quotas.get(type);
            if (held != null) {
                held.remove(e);
            }
        } else {
            quotas.computeIfAbsent(type, t -> new ConcurrentHashMap<>()).put(e, value);
        }
        version.incrementAndGet();
    }

    /** Changes with every update, so Kafka can be told to re-read the bounds. */
    public long version() {
        return version.get();
    }

    /** The metric tags {user, client id} of the level a request resolves to, or null for none. */
    public String[] tags(ClientQuotaType type, String user, String clientId) {
        Map<Entity, Double> held = quotas.getOrDefault(type, Map.of());
        if (held.isEmpty()) {
            return null;
        }
        List<Object[]> levels = List.of(
                new Object[] {new Entity(user, clientId), user, clientId},
                new Object[] {new Entity(user, DEFAULT), user, clientId},
                new Object[] {new Entity(user, null), user, ""},
                new Object[] {new Entity(DEFAULT, clientId), user, clientId},
                new Object[] {new Entity(DEFAULT, DEFAULT), user, clientId},
                new Object[] {new Entity(DEFAULT, null), user, ""},
                new Object[] {new Entity(null, clientId), "", clientId},
                new Object[] {new Entity(null, DEFAULT), "", clientId});
        for (Object[] level : levels) {
            if (held.containsKey((Entity) level[0])) {
                return new String[] {(String) level[1], (String) level[2]};
            }
        }
        return null;
    }

    /** The bound of the quota the tags name, or null (unlimited). */
    public Double limit(ClientQuotaType type, String user, String clientId) {
        Map<Entity, Double> held = quotas.getOrDefault(type, Map.of());
        List<Entity> order;
        if (!user.isEmpty() && !clientId.isEmpty()) {
            order = List.of(new Entity(user, clientId), new Entity(user, DEFAULT), new Entity(DEFAULT, clientId),
                    new Entity(DEFAULT, DEFAULT));
        } else if (!user.isEmpty()) {
            order = List.of(new Entity(user, null), new Entity(DEFAULT, null));
        } else if (!clientId.isEmpty()) {
            order = List.of(new Entity(null, clientId), new Entity(null, DEFAULT));
        } else {
            return null;
        }
        for (Entity e : order) {
            Double value = held.get(e);
            if (value != null) {
                return value;
            }
        }
        return null;
    }
}
