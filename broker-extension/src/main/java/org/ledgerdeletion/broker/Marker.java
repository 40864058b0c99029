package org.ledgerdeletion.broker;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/** Makes pending deletions durable on the queue before a metadata write drops their ledgers. */
interface Marker {
    /**
     * Completes once every one of {@code drops} is durable on the queue; fails if one could not be made so in
     * time. Never blocks the caller.
     */
    CompletableFuture<Void> mark(List<PendingDeletion> drops);
}
