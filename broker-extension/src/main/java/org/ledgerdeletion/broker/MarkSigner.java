package org.ledgerdeletion.broker;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Optional;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Signs what the extension publishes, so the worker can tell the broker's own pending deletions from anything
 * else on the queue: the message property {@value #PROPERTY} = {@code hmac-sha256:} + lowercase hex of
 * HMAC-SHA256(key, the message's payload bytes as sent). The key is the content of the file
 * {@code ledgerDeletionMarkKeyFile} names (trailing ASCII whitespace and newlines stripped); the worker holds the
 * same bytes ({@code worker.broker_mark_key_file}).
 */
final class MarkSigner {
    static final String PROPERTY = "ledger-deletion-mark";
    static final String SCHEME = "hmac-sha256:";
    private static final String ALGORITHM = "HmacSHA256";

    private final SecretKeySpec key;

    MarkSigner(byte[] key) {
        if (key.length == 0) {
            throw new IllegalArgumentException("an empty HMAC key");
        }
        this.key = new SecretKeySpec(key, ALGORITHM);
    }

    /**
     * The signer of the key file {@code path} names; empty when {@code path} is blank (nothing is signed). A file
     * that cannot be read, or holds nothing but whitespace, is an error naming {@code configKey}.
     */
    static Optional<MarkSigner> fromKeyFile(String path, String configKey) {
        if (path == null || path.isBlank()) {
            return Optional.empty();
        }
        byte[] bytes;
        try {
            bytes = Files.readAllBytes(Path.of(path.strip()));
        } catch (IOException | RuntimeException e) {
            throw new IllegalArgumentException(configKey + "=" + path + ": cannot read the broker's mark key file ("
                    + e + ")", e);
        }
        int end = bytes.length;
        while (end > 0 && isAsciiWhitespace(bytes[end - 1])) {
            end--;
        }
        if (end == 0) {
            throw new IllegalArgumentException(configKey + "=" + path + ": the broker's mark key file is empty");
        }
        return Optional.of(new MarkSigner(Arrays.copyOf(bytes, end)));
    }

    /**
     * The bytes the key file's end is stripped of: ASCII whitespace, exactly what the worker's
     * {@code bytes.rstrip()} strips (a key of random bytes may end in others, such as 0x1f, which both keep).
     */
    private static boolean isAsciiWhitespace(byte b) {
        return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == 0x0b || b == 0x0c;
    }

    /** The value of {@value #PROPERTY} for a message whose payload is {@code payload}. */
    String sign(byte[] payload) {
        try {
            Mac mac = Mac.getInstance(ALGORITHM);
            mac.init(key);
            return SCHEME + HexFormat.of().formatHex(mac.doFinal(payload));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HMAC-SHA256 unavailable: " + e, e);
        }
    }
}
