package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class MarkSignerTest {
    // The test vector both sides check (the worker's verification computes the same for these bytes).
    static final String TEST_VECTOR = "hmac-sha256:ce216971565342fd63ad7106fbea61bcda701ceac70c809b84adf50647026998";

    private static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void theTestVector() {
        assertEquals(TEST_VECTOR, new MarkSigner(bytes("test-key")).sign(bytes("payload")));
    }

    @Test
    void theKeyFileWithoutItsTrailingWhitespace(@TempDir Path dir) throws Exception {
        Path key = dir.resolve("mark.key");
        Files.writeString(key, "test-key \r\n\n");
        assertEquals(TEST_VECTOR, MarkSigner.fromKeyFile(key.toString(), "k").orElseThrow().sign(bytes("payload")));
    }

    @Test
    void aBinaryKeyKeepsItsOtherTrailingBytes(@TempDir Path dir) throws Exception {
        // As the worker's bytes.rstrip(): only ASCII whitespace goes; 0x1f (whitespace to Java) stays.
        Path key = dir.resolve("binary.key");
        Files.write(key, new byte[] {1, 2, 0x1f, 0x0b, 0x0c, ' '});
        assertEquals(new MarkSigner(new byte[] {1, 2, 0x1f}).sign(bytes("payload")),
                MarkSigner.fromKeyFile(key.toString(), "k").orElseThrow().sign(bytes("payload")));
    }

    @Test
    void noKeyFileSignsNothing() {
        assertTrue(MarkSigner.fromKeyFile("", "k").isEmpty());
        assertTrue(MarkSigner.fromKeyFile(null, "k").isEmpty());
    }

    @Test
    void anUnreadableOrEmptyKeyFileIsAnErrorNamingTheKey(@TempDir Path dir) throws Exception {
        Path empty = dir.resolve("empty.key");
        Files.writeString(empty, " \n");
        var e = assertThrows(IllegalArgumentException.class,
                () -> MarkSigner.fromKeyFile(empty.toString(), ExtensionConfig.MARK_KEY_FILE));
        assertTrue(e.getMessage().startsWith("ledgerDeletionMarkKeyFile=" + empty + ": "), e.getMessage());
        assertTrue(e.getMessage().contains("empty"), e.getMessage());
        Path missing = dir.resolve("missing.key");
        e = assertThrows(IllegalArgumentException.class,
                () -> MarkSigner.fromKeyFile(missing.toString(), ExtensionConfig.MARK_KEY_FILE));
        assertTrue(e.getMessage().startsWith("ledgerDeletionMarkKeyFile=" + missing + ": cannot read"),
                e.getMessage());
    }
}
