package org.ledgerdeletion.broker;

import java.util.Map;
import java.util.concurrent.CompletableFuture;

/** Sends one message to the pending-deletions topic; the publisher's retries, deadlines and health sit above. */
interface QueueSender extends AutoCloseable {
    /** Completes once the queue and a producer on it are ready (the first send waits for the same). */
    CompletableFuture<?> ready();

    /**
     * Sends {@code payload} with the message properties {@code properties}; completes once the broker acknowledged
     * it (the message is durable), fails otherwise.
     */
    CompletableFuture<?> send(byte[] payload, Map<String, String> properties);

    @Override
    void close();
}
