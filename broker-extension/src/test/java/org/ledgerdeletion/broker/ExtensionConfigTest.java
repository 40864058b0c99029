package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Properties;
import org.junit.jupiter.api.Test;

class ExtensionConfigTest {
    private static ExtensionConfig of(String... keyValues) {
        Properties p = new Properties();
        for (int i = 0; i < keyValues.length; i += 2) {
            p.setProperty(keyValues[i], keyValues[i + 1]);
        }
        return ExtensionConfig.of(p, "pulsar://x:1", "http://x:2", null, null);
    }

    @Test
    void queueNamespaceAndVersionOneNamesAreExcluded() {
        var cfg = of("ledgerDeletionExcludedNamespaces", "a/b, c/d");
        assertTrue(cfg.excluded("pulsar/system/persistent/__ledger_deletion-partition-0"));
        assertTrue(cfg.excluded("pulsar/system/persistent/__change_events"));
        assertTrue(cfg.excluded("c/d/persistent/t"));
        assertFalse(cfg.excluded("public/default/persistent/t-partition-0"));
        assertFalse(cfg.excluded("public/default/segment/t/0000-7fff-1"));
        // The broker's heartbeat topic: a version-1 name (tenant/cluster/namespace).
        assertTrue(cfg.excluded("pulsar/standalone/127.0.0.1:8080/persistent/healthcheck"));
        assertFalse(cfg.excluded("pulsar/127.0.0.1:8080/persistent/healthcheck"));
    }

    @Test
    void defaultsAreTheWorkers() {
        var cfg = of();
        assertEquals("persistent://pulsar/system/__ledger_deletion", cfg.pendingTopic());
        assertEquals(60_000, cfg.sendDelayMs());
        assertEquals("", cfg.markKeyFile());
    }

    @Test
    void deferModeIsOffByDefaultAndItsBoundPositive() {
        assertFalse(of().deferBrokerDeletes());
        assertEquals(100_000, of().deferMaxLedgers());
        var cfg = of("ledgerDeletionDeferBrokerDeletes", "true", "ledgerDeletionDeferMaxLedgers", "50");
        assertTrue(cfg.deferBrokerDeletes());
        assertEquals(50, cfg.deferMaxLedgers());
        var e = assertThrows(IllegalArgumentException.class, () -> of("ledgerDeletionDeferMaxLedgers", "0"));
        assertTrue(e.getMessage().contains("ledgerDeletionDeferMaxLedgers"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> of("ledgerDeletionDeferMaxLedgers", "many"));
    }

    @Test
    void topicsNamedAsSuch() {
        var cfg = of();
        assertTrue(cfg.excludedTopic("persistent://pulsar/system/__change_events"));
        assertFalse(cfg.excludedTopic("persistent://public/default/t-partition-1"));
        assertTrue(cfg.excludedTopic("persistent://pulsar/standalone/ns/t"), "version 1: not queued");
        assertTrue(cfg.excludedTopic("non-persistent://public/default/t"));
        assertTrue(cfg.excludedTopic("persistent://public//t"));
    }

    @Test
    void theMarkKeyFile() {
        assertEquals("/etc/pulsar/mark.key", of("ledgerDeletionMarkKeyFile", " /etc/pulsar/mark.key ").markKeyFile());
        assertEquals("ledgerDeletionMarkKeyFile", ExtensionConfig.MARK_KEY_FILE);
    }
}
