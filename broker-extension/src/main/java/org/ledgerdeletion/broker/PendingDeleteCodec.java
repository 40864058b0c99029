package org.ledgerdeletion.broker;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;

/**
 * The Avro binary encoding of PendingDeleteLedgerInfo, from the schema JSON the Python worker registers
 * (the resource is json.dumps(worker.formats.message.AVRO_SCHEMA), checked by
 * tests/unit/test_message.py).
 */
public final class PendingDeleteCodec {

    /** The schema text, byte for byte what the worker uploads: the same text is the same schema version. */
    public static final String SCHEMA_JSON = loadSchemaJson();
    public static final Schema SCHEMA = new Schema.Parser().parse(SCHEMA_JSON);

    private static final Schema OFFLOAD_SCHEMA = SCHEMA.getField("offloadContext").schema().getTypes().get(1);
    private static final Schema COMPONENT_SCHEMA = SCHEMA.getField("ledgerComponent").schema();
    private static final Schema TYPE_SCHEMA = SCHEMA.getField("ledgerType").schema();

    private PendingDeleteCodec() {
    }

    private static String loadSchemaJson() {
        try (InputStream in = PendingDeleteCodec.class.getResourceAsStream("PendingDeleteLedgerInfo.avsc")) {
            if (in == null) {
                throw new IllegalStateException("PendingDeleteLedgerInfo.avsc missing from the jar");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8).strip();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static GenericRecord toRecord(PendingDeletion d, Map<String, String> properties) {
        GenericRecord r = new GenericData.Record(SCHEMA);
        r.put("topicName", d.topicName());
        r.put("ledgerComponent", new GenericData.EnumSymbol(COMPONENT_SCHEMA, d.component().name()));
        r.put("cursorName", d.cursorName());
        r.put("schemaId", d.schemaId());
        r.put("ledgerType", new GenericData.EnumSymbol(TYPE_SCHEMA, d.ledgerType().name()));
        r.put("ledgerId", d.ledgerId());
        if (d.offload() != null) {
            GenericRecord o = new GenericData.Record(OFFLOAD_SCHEMA);
            o.put("uidMsb", d.offload().uidMsb());
            o.put("uidLsb", d.offload().uidLsb());
            o.put("driverName", d.offload().driverName());
            o.put("driverMetadata", new HashMap<>(d.offload().driverMetadata()));
            r.put("offloadContext", o);
        } else {
            r.put("offloadContext", null);
        }
        r.put("properties", new HashMap<>(properties));
        return r;
    }

    public static byte[] encode(PendingDeletion d, Map<String, String> properties) {
        ByteArrayOutputStream out = new ByteArrayOutputStream(128);
        BinaryEncoder enc = EncoderFactory.get().binaryEncoder(out, null);
        try {
            new GenericDatumWriter<GenericRecord>(SCHEMA).write(toRecord(d, properties), enc);
            enc.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out.toByteArray();
    }
}
