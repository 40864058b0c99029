package org.ledgerdeletion.broker;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * The protobuf wire format, as much of it as the extension reads of managed-ledger metadata: fields by number,
 * varints, length-delimited values, the rest skipped.
 *
 * <p>The extension reads Pulsar's metadata objects through their serialized bytes, not their classes: the bytes
 * are the same on every Pulsar line (brokers of two versions share them during an upgrade), the classes are not
 * (protobuf-java's {@code MLDataFormats} up to 4.1, LightProto's {@code org.apache.bookkeeper.mledger.proto} from
 * 4.2). protobuf-java itself is not used because a broker need not have it on its classpath.
 */
final class ProtoWire {
    static final int VARINT = 0;
    static final int FIXED64 = 1;
    static final int LENGTH_DELIMITED = 2;
    static final int FIXED32 = 5;

    private ProtoWire() {
    }

    /** One message's fields in order. */
    static final class Reader {
        private final byte[] buf;
        private int pos;
        private final int end;
        private int tag;
        private int fieldStart;

        Reader(byte[] buf) {
            this(buf, 0, buf.length);
        }

        private Reader(byte[] buf, int from, int end) {
            this.buf = buf;
            this.pos = from;
            this.end = end;
        }

        /** Moves to the next field; false at the end of the message. */
        boolean next() {
            if (pos >= end) {
                return false;
            }
            fieldStart = pos;
            long t = varint();
            if (t > Integer.MAX_VALUE || (t >>> 3) == 0) {
                throw new IllegalArgumentException("bad protobuf tag " + t + " at " + fieldStart);
            }
            tag = (int) t;
            return true;
        }

        int field() {
            return tag >>> 3;
        }

        int wireType() {
            return tag & 7;
        }

        long int64() {
            expect(VARINT);
            return varint();
        }

        boolean bool() {
            return int64() != 0;
        }

        String string() {
            Reader r = message();
            return new String(buf, r.pos, r.end - r.pos, StandardCharsets.UTF_8);
        }

        /** The current field as a message of two strings, fields 1 and 2 (KeyValue, StringProperty). */
        Map.Entry<String, String> stringPair() {
            Reader r = message();
            String first = "";
            String second = "";
            while (r.next()) {
                switch (r.field()) {
                    case 1 -> first = r.string();
                    case 2 -> second = r.string();
                    default -> r.skip();
                }
            }
            return Map.entry(first, second);
        }

        /** The current length-delimited field as a message of its own. */
        Reader message() {
            expect(LENGTH_DELIMITED);
            int len = length();
            Reader r = new Reader(buf, pos, pos + len);
            pos += len;
            return r;
        }

        /** The current field's whole encoding (tag included), after reading or skipping its value. */
        byte[] rawField() {
            byte[] out = new byte[pos - fieldStart];
            System.arraycopy(buf, fieldStart, out, 0, out.length);
            return out;
        }

        /** The bytes of the current length-delimited field's value. */
        byte[] bytes() {
            Reader r = message();
            byte[] out = new byte[r.end - r.pos];
            System.arraycopy(buf, r.pos, out, 0, out.length);
            return out;
        }

        void skip() {
            switch (wireType()) {
                case VARINT -> varint();
                case FIXED64 -> advance(8);
                case LENGTH_DELIMITED -> advance(length());
                case FIXED32 -> advance(4);
                default -> throw new IllegalArgumentException("unsupported protobuf wire type " + wireType()
                        + " at " + fieldStart);
            }
        }

        private void expect(int wireType) {
            if (wireType() != wireType) {
                throw new IllegalArgumentException("field " + field() + ": wire type " + wireType() + ", expected "
                        + wireType);
            }
        }

        private int length() {
            long len = varint();
            if (len < 0 || len > end - pos) {
                throw new IllegalArgumentException("length " + len + " past the end of the message at " + pos);
            }
            return (int) len;
        }

        private void advance(int n) {
            if (n > end - pos) {
                throw new IllegalArgumentException("truncated message at " + pos);
            }
            pos += n;
        }

        private long varint() {
            long v = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (pos >= end) {
                    throw new IllegalArgumentException("truncated varint at " + pos);
                }
                byte b = buf[pos++];
                v |= (long) (b & 0x7f) << shift;
                if (b >= 0) {
                    return v;
                }
            }
            throw new IllegalArgumentException("varint longer than 10 bytes at " + pos);
        }
    }

    /** Builds a message from fields (tests, and the ledger list a held-back rollover writes). */
    static final class Writer {
        private final ByteArrayOutputStream out = new ByteArrayOutputStream();

        Writer int64(int field, long v) {
            tag(field, VARINT);
            varint(v);
            return this;
        }

        Writer bool(int field, boolean v) {
            return int64(field, v ? 1 : 0);
        }

        Writer string(int field, String v) {
            return bytes(field, v.getBytes(StandardCharsets.UTF_8));
        }

        Writer message(int field, Writer m) {
            return bytes(field, m.toByteArray());
        }

        Writer bytes(int field, byte[] v) {
            tag(field, LENGTH_DELIMITED);
            varint(v.length);
            out.writeBytes(v);
            return this;
        }

        /** A field already encoded (tag included), copied as it is. */
        Writer raw(byte[] field) {
            out.writeBytes(field);
            return this;
        }

        byte[] toByteArray() {
            return out.toByteArray();
        }

        private void tag(int field, int wireType) {
            varint(((long) field << 3) | wireType);
        }

        private void varint(long v) {
            while ((v & ~0x7fL) != 0) {
                out.write((int) ((v & 0x7f) | 0x80));
                v >>>= 7;
            }
            out.write((int) v);
        }
    }
}
