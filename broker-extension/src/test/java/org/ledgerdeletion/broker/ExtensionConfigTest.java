package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
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
    void queueNamespaceIsExcluded() {
        var cfg = of();
        assertTrue(cfg.excluded("persistent://pulsar/system/__ledger_deletion-partition-0"));
        assertTrue(cfg.excluded("persistent://pulsar/system/__change_events"));
        assertFalse(cfg.excluded("persistent://public/default/t-partition-0"));
        assertTrue(cfg.excluded("persistent://pulsar/standalone/127.0.0.1:8080/healthcheck"));
        assertFalse(cfg.excluded("persistent://pulsar/127.0.0.1:8080/healthcheck"));
    }

    @Test
    void defaultsAreTheWorkers() {
        var cfg = of();
        assertEquals("persistent://pulsar/system/__ledger_deletion", cfg.pendingTopic());
        assertEquals(60_000, cfg.sendDelayMs());
        assertEquals("", cfg.markKeyFile());
    }

    @Test
    void theMarkKeyFile() {
        assertEquals("/etc/pulsar/mark.key", of("ledgerDeletionMarkKeyFile", " /etc/pulsar/mark.key ").markKeyFile());
        assertEquals("ledgerDeletionMarkKeyFile", ExtensionConfig.MARK_KEY_FILE);
    }
}
