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
}
