package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Optional;
import org.junit.jupiter.api.Test;

class ManagedLedgerNameTest {
    private static Optional<String> topic(String managedLedgerName) {
        return ManagedLedgerName.parse(managedLedgerName).map(ManagedLedgerName::topic);
    }

    @Test
    void aTopicOrPartition() {
        assertEquals(Optional.of("persistent://public/default/t-partition-0"),
                topic("public/default/persistent/t-partition-0"));
        assertEquals("public/default",
                ManagedLedgerName.parse("public/default/persistent/t").orElseThrow().namespace());
        // The local name is URL-encoded in the managed ledger's name.
        assertEquals(Optional.of("persistent://public/default/a b:c"), topic("public/default/persistent/a+b%3Ac"));
    }

    @Test
    void aScalableTopicsSegmentAsPulsar5NamesIt() {
        // TopicName.fromPersistenceNamingEncoding in pulsar-common 5.0.0-M1: segment://tenant/ns/topic/descriptor.
        assertEquals(Optional.of("segment://public/default/orders/0000-7fff-3"),
                topic("public/default/segment/orders/0000-7fff-3"));
    }

    @Test
    void namesTheMessagesDoNotCarry() {
        // Version 1 (tenant/cluster/namespace): Pulsar 5.0 would read it as another topic, without the cluster.
        assertEquals(Optional.empty(), topic("pulsar/standalone/127.0.0.1:8080/persistent/healthcheck"));
        assertEquals(Optional.empty(), topic("public/default/non-persistent/t"));
        assertEquals(Optional.empty(), topic("public/default/persistent/"));
        assertEquals(Optional.empty(), topic("public//persistent/t"));
        assertEquals(Optional.empty(), topic("t"));
    }
}
