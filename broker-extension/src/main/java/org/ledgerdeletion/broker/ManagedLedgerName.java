package org.ledgerdeletion.broker;

import java.util.Optional;
import org.apache.pulsar.common.util.Codec;

/**
 * What a managed ledger's name says: the topic a pending deletion names and that topic's namespace, for the names
 * the worker's messages carry:
 * <ul>
 *   <li>{@code tenant/ns/persistent/<encoded topic>}: {@code persistent://tenant/ns/<topic>} (a partition's own
 *       name for a partition);</li>
 *   <li>{@code tenant/ns/segment/<encoded topic>/<descriptor>}, a segment of a Pulsar 5.0 scalable topic
 *       (PIP-460): {@code segment://tenant/ns/<topic>/<descriptor>}, as Pulsar's own
 *       {@code TopicName.fromPersistenceNamingEncoding} names it.</li>
 * </ul>
 * A version-1 name ({@code tenant/cluster/ns/persistent/topic}, e.g. the broker's heartbeat topic) is none of
 * these: the worker's messages carry no cluster, and Pulsar 5.0's own reading of such a name drops it (naming
 * another topic), so those ledgers are not queued. Parsed here rather than with {@code TopicName}, whose
 * handling of these names differs between Pulsar lines.
 */
record ManagedLedgerName(String namespace, String topic) {

    static Optional<ManagedLedgerName> parse(String managedLedgerName) {
        String[] p = managedLedgerName.split("/", -1);
        for (String part : p) {
            if (part.isEmpty()) {
                return Optional.empty();
            }
        }
        String namespace = p[0] + "/" + (p.length > 1 ? p[1] : "");
        if (p.length == 4 && p[2].equals("persistent")) {
            return Optional.of(new ManagedLedgerName(namespace,
                    "persistent://" + namespace + "/" + Codec.decode(p[3])));
        }
        if (p.length == 5 && p[2].equals("segment")) {
            return Optional.of(new ManagedLedgerName(namespace,
                    "segment://" + namespace + "/" + Codec.decode(p[3]) + "/" + p[4]));
        }
        return Optional.empty();
    }

    /**
     * A persistent topic's name ({@code persistent://tenant/ns/topic}) read as its managed ledger's; empty for any
     * other form (a version-1 name has a cluster: four parts).
     */
    static Optional<ManagedLedgerName> ofTopic(String topic) {
        String prefix = "persistent://";
        if (topic == null || !topic.startsWith(prefix)) {
            return Optional.empty();
        }
        String[] p = topic.substring(prefix.length()).split("/", -1);
        if (p.length != 3 || p[0].isEmpty() || p[1].isEmpty() || p[2].isEmpty()) {
            return Optional.empty();
        }
        return Optional.of(new ManagedLedgerName(p[0] + "/" + p[1], topic));
    }
}
