package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.apache.bookkeeper.mledger.impl.MetaStore;
import org.junit.jupiter.api.Test;

class MetaStoreAdapterTest {
    private final MetaStoreAdapter adapter = MetaStoreAdapter.of(MetaStore.class);

    @Test
    void picksTheLineOfTheMetaStoreOnTheClasspath() {
        // The build's Pulsar (pulsar.version): 4.0 and 4.1 are protobuf-java, 4.2 and later LightProto.
        String version = System.getProperty("pulsar.version", "4.0.8");
        boolean protobuf = version.startsWith("4.0") || version.startsWith("4.1") || version.startsWith("3.");
        assertEquals(protobuf ? MetaStoreAdapter.Line.PROTOBUF : MetaStoreAdapter.Line.LIGHTPROTO, adapter.line());
        assertTrue(adapter.describe().contains("ManagedLedgerInfo"), adapter.describe());
    }

    @Test
    void metadataObjectsRoundTripThroughTheirBytes() {
        byte[] list = Metadata.ledgerList(Metadata.plain(1), Metadata.offloaded(2, 3, 4, true));
        assertArrayEquals(list, adapter.ledgerInfoBytes(adapter.ledgerInfo(list)));
        byte[] cursor = Metadata.cursor(5, Map.of("#pulsar.internal.delayed.bucket_1_2", "9"));
        assertArrayEquals(cursor, adapter.cursorInfoBytes(adapter.cursorInfo(cursor)));
    }

    @Test
    void anInterfaceWithoutTheInterceptedMethodsIsRefusedByName() {
        var e = assertThrows(UnsupportedOperationException.class, () -> MetaStoreAdapter.of(Runnable.class));
        assertTrue(e.getMessage().contains("getManagedLedgerInfo"), e.getMessage());
    }
}
