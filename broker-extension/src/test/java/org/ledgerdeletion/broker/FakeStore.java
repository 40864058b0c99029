package org.ledgerdeletion.broker;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.bookkeeper.mledger.ManagedLedgerException.MetaStoreException;
import org.apache.bookkeeper.mledger.ManagedLedgerException.MetadataNotFoundException;
import org.apache.bookkeeper.mledger.impl.MetaStore;
import org.apache.bookkeeper.mledger.impl.MetaStore.MetaStoreCallback;

/**
 * An in-memory {@code MetaStore} of the running Pulsar line (a proxy, as the extension's own is), holding each
 * managed ledger's info and cursors as bytes, with injectable faults. Completes callbacks on the caller's thread.
 */
final class FakeStore implements InvocationHandler {
    /** How the next writes end. */
    enum Fault {
        NONE,
        /** The write fails and stores nothing. */
        FAIL,
        /** The write stores its value but reports a failure (a timeout after the write landed). */
        AMBIGUOUS,
        /** The call throws at once. */
        THROW
    }

    private static final List<String> STORE_CALLS = List.of("getManagedLedgerInfo", "asyncGetCursorInfo",
            "asyncUpdateLedgerIds", "asyncUpdateCursorInfo", "asyncRemoveCursor", "removeManagedLedger");

    final MetaStoreAdapter adapter = MetaStoreAdapter.of(MetaStore.class);
    final Map<String, byte[]> ledgerLists = new ConcurrentHashMap<>();
    final Map<String, byte[]> cursors = new ConcurrentHashMap<>();
    final List<String> calls = new CopyOnWriteArrayList<>();
    volatile Fault writes = Fault.NONE;

    MetaStore proxy() {
        return (MetaStore) Proxy.newProxyInstance(MetaStore.class.getClassLoader(), new Class<?>[] {MetaStore.class},
                this);
    }

    @Override
    @SuppressWarnings("unchecked")
    public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
        String name = method.getName();
        if (method.isDefault()) {
            return InvocationHandler.invokeDefault(proxy, method, args);
        }
        calls.add(name);
        if (!STORE_CALLS.contains(name)) {
            throw new UnsupportedOperationException(name);
        }
        MetaStoreCallback<Object> cb = (MetaStoreCallback<Object>) args[args.length - 1];
        switch (name) {
            case "getManagedLedgerInfo" -> read(ledgerLists.get((String) args[0]), true, cb);
            case "asyncGetCursorInfo" -> read(cursors.get((String) args[1]), false, cb);
            case "asyncUpdateLedgerIds" -> write(cb, () -> ledgerLists.put((String) args[0],
                    adapter.ledgerInfoBytes(args[1])));
            case "asyncUpdateCursorInfo" -> write(cb, () -> cursors.put((String) args[1],
                    adapter.cursorInfoBytes(args[2])));
            case "asyncRemoveCursor" -> write(cb, () -> cursors.remove((String) args[1]));
            case "removeManagedLedger" -> write(cb, () -> {
                ledgerLists.remove((String) args[0]);
                cursors.clear();
            });
            default -> throw new UnsupportedOperationException(name);
        }
        return null;
    }

    private void read(byte[] stored, boolean ledgerList, MetaStoreCallback<Object> cb) {
        if (stored == null) {
            cb.operationFailed(new MetadataNotFoundException("not stored"));
        } else {
            cb.operationComplete(ledgerList ? adapter.ledgerInfo(stored) : adapter.cursorInfo(stored), null);
        }
    }

    private void write(MetaStoreCallback<Object> cb, Runnable store) {
        switch (writes) {
            case NONE -> {
                store.run();
                cb.operationComplete(null, null);
            }
            case FAIL -> cb.operationFailed(new MetaStoreException("injected failure"));
            case AMBIGUOUS -> {
                store.run();
                cb.operationFailed(new MetaStoreException("injected failure after the write"));
            }
            case THROW -> throw new IllegalStateException("injected throw");
            default -> throw new AssertionError(writes);
        }
    }

    long storedCursorLedger(String cursor) {
        return CursorLedgers.parse(cursors.get(cursor)).cursorLedger();
    }

    List<Long> storedLedgers(String managedLedger) {
        return List.copyOf(LedgerList.parse(ledgerLists.get(managedLedger)).ledgers().keySet());
    }
}
