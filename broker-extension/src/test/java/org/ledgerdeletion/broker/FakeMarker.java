package org.ledgerdeletion.broker;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Function;

/** A {@link Marker} whose answer the test sets: durable at once by default. */
final class FakeMarker implements Marker {
    final List<List<PendingDeletion>> calls = new CopyOnWriteArrayList<>();
    volatile Function<List<PendingDeletion>, CompletableFuture<Void>> answer =
            d -> CompletableFuture.completedFuture(null);

    @Override
    public CompletableFuture<Void> mark(List<PendingDeletion> drops) {
        calls.add(List.copyOf(drops));
        return answer.apply(drops);
    }

    List<PendingDeletion> marked() {
        return calls.stream().flatMap(List::stream).toList();
    }

    void failing() {
        answer = d -> CompletableFuture.failedFuture(new IllegalStateException("queue unavailable"));
    }
}
