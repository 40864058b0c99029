package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.util.Arrays;
import java.util.Map;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.junit.jupiter.api.Test;

class PendingDeleteCodecTest {
    @Test
    void roundTripsThroughTheWorkersSchema() throws IOException {
        var d = PendingDeletion.offloaded("persistent://a/b/c", 42,
                new PendingDeletion.Offload(-1L, 7L, "aws-s3", Map.of("bucket", "x")));
        byte[] bytes = PendingDeleteCodec.encode(d, Map.of("source", "test"));
        GenericRecord r = new GenericDatumReader<GenericRecord>(PendingDeleteCodec.SCHEMA)
                .read(null, DecoderFactory.get().binaryDecoder(bytes, null));
        assertEquals("persistent://a/b/c", r.get("topicName").toString());
        assertEquals("OFFLOAD_LEDGER", r.get("ledgerType").toString());
        assertEquals(42L, r.get("ledgerId"));
        assertEquals(-1L, ((GenericRecord) r.get("offloadContext")).get("uidMsb"));
    }

    @Test
    void aSchemaLedgerCarriesItsSchemaId() throws IOException {
        var d = PendingDeletion.schemaLedger("persistent://a/b/c", "a/b/c", 7);
        GenericRecord r = new GenericDatumReader<GenericRecord>(PendingDeleteCodec.SCHEMA)
                .read(null, DecoderFactory.get().binaryDecoder(PendingDeleteCodec.encode(d, Map.of()), null));
        assertEquals("SCHEMA_STORAGE", r.get("ledgerComponent").toString());
        assertEquals("a/b/c", r.get("schemaId").toString());
        assertEquals("COMPACTED_LEDGER", PendingDeleteCodec.toRecord(PendingDeletion.compactedLedger(
                "persistent://a/b/c", 8), Map.of()).get("ledgerComponent").toString());
    }

    @Test
    void theEnumsAreTheSchemasSymbols() {
        assertEquals(PendingDeleteCodec.SCHEMA.getField("ledgerComponent").schema().getEnumSymbols(),
                Arrays.stream(LedgerComponent.values()).map(Enum::name).toList());
        assertEquals(PendingDeleteCodec.SCHEMA.getField("ledgerType").schema().getEnumSymbols(),
                Arrays.stream(LedgerType.values()).map(Enum::name).toList());
    }

    @Test
    void schemaTextIsTheWorkersJson() {
        // The worker registers json.dumps(AVRO_SCHEMA): same text, same schema version.
        assertEquals('{', PendingDeleteCodec.SCHEMA_JSON.charAt(0));
        assertEquals("org.apache.pulsar.broker.service.ledgerdeletion", PendingDeleteCodec.SCHEMA.getNamespace());
    }
}
