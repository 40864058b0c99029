package org.ledgerdeletion.broker;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.net.URI;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.discover.RegistrationClient;
import org.apache.bookkeeper.meta.LayoutManager;
import org.apache.bookkeeper.meta.LedgerManager;
import org.apache.bookkeeper.meta.LedgerManagerFactory;
import org.apache.bookkeeper.meta.MetadataClientDriver;
import org.apache.bookkeeper.meta.MetadataDrivers;
import org.apache.bookkeeper.meta.exceptions.Code;
import org.apache.bookkeeper.meta.exceptions.MetadataException;
import org.apache.bookkeeper.stats.StatsLogger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Defer mode's seam: a BookKeeper metadata client driver, registered under its own scheme ({@value #SCHEME}), that
 * the broker's managed-ledger BookKeeper clients use in front of the real one ({@link DeferringBookKeeperClientFactory}
 * points their {@code metadataServiceUri} at {@code ledgerdeletion:<the real uri>}).
 *
 * <p>Everything is the real driver's (picked by the real uri's scheme and initialised with it: for a broker,
 * Pulsar's {@code metadata-store:} driver on the broker's own metadata store), except one call: a
 * {@code LedgerManager.removeLedgerMetadata} for a ledger in the {@link DeferredDeletes} registry completes without
 * removing anything. {@code BookKeeper.asyncDeleteLedger} is nothing but that call ({@code LedgerDeleteOp}), so the
 * broker's delete of such a ledger succeeds and leaves it, metadata and data, to the worker. The ledger manager and
 * its factory are proxies over BookKeeper's own interfaces: whatever a BookKeeper line adds passes through.
 */
public final class DeferringMetadataDriver implements MetadataClientDriver {
    private static final Logger log = LoggerFactory.getLogger(DeferringMetadataDriver.class);

    /** The scheme this driver is registered under. */
    public static final String SCHEME = "ledgerdeletion";
    /** The client configuration property that hands this driver its registry (an object, as Pulsar's drivers get
     * the broker's metadata store). */
    static final String REGISTRY_PROPERTY = "ledgerDeletionDeferredDeletes";

    private MetadataClientDriver delegate;
    private DeferredDeletes registry;
    private LedgerManagerFactory factory;

    /** Registers this driver's scheme with BookKeeper (idempotent). */
    static void register() {
        MetadataDrivers.registerClientDriver(SCHEME, DeferringMetadataDriver.class);
    }

    /** The uri that makes a BookKeeper client use this driver in front of the one {@code realUri} names. */
    static String uriFor(String realUri) {
        return SCHEME + ":" + realUri;
    }

    @Override
    public MetadataClientDriver initialize(ClientConfiguration conf, ScheduledExecutorService scheduler,
                                           StatsLogger statsLogger, Optional<Object> ctx) throws MetadataException {
        String uri;
        try {
            uri = conf.getMetadataServiceUri();
        } catch (Exception e) {
            throw new MetadataException(Code.INVALID_METADATA_SERVICE_URI, e);
        }
        if (uri == null || !uri.startsWith(SCHEME + ":")) {
            throw new MetadataException(Code.INVALID_METADATA_SERVICE_URI, "not a " + SCHEME + ": uri: " + uri);
        }
        Object r = conf.getProperty(REGISTRY_PROPERTY);
        if (!(r instanceof DeferredDeletes)) {
            throw new MetadataException(Code.INVALID_METADATA_SERVICE_URI,
                    "no deferred-deletes registry in the client configuration (" + REGISTRY_PROPERTY + ")");
        }
        registry = (DeferredDeletes) r;
        String real = uri.substring(SCHEME.length() + 1);
        // The real driver reads the uri (its scheme, its ledgers root path) from the same configuration: the
        // client's, which then names the real store again, as on a broker without defer mode.
        conf.setMetadataServiceUri(real);
        try {
            delegate = MetadataDrivers.getClientDriver(URI.create(real));
        } catch (RuntimeException e) {
            throw new MetadataException(Code.INVALID_METADATA_SERVICE_URI, e);
        }
        delegate.initialize(conf, scheduler, statsLogger, ctx);
        log.info("[ledger-deletion] defer mode: BookKeeper client on {} (driver {}); broker deletes of queued ledgers"
                + " are left to the worker", real, delegate.getClass().getName());
        return this;
    }

    @Override
    public String getScheme() {
        return delegate.getScheme();
    }

    @Override
    public RegistrationClient getRegistrationClient() {
        return delegate.getRegistrationClient();
    }

    @Override
    public synchronized LedgerManagerFactory getLedgerManagerFactory() throws MetadataException {
        if (factory == null) {
            factory = proxy(LedgerManagerFactory.class, delegate.getLedgerManagerFactory(), (real, method, args) ->
                    method.getName().equals("newLedgerManager") && method.getParameterCount() == 0
                            ? deferring((LedgerManager) invoke(real, method, args), registry)
                            : invoke(real, method, args));
        }
        return factory;
    }

    @Override
    public LayoutManager getLayoutManager() {
        return delegate.getLayoutManager();
    }

    @Override
    public void close() {
        delegate.close();
    }

    @Override
    public void setSessionStateListener(SessionStateListener sessionStateListener) {
        delegate.setSessionStateListener(sessionStateListener);
    }

    @Override
    public CompletableFuture<Boolean> isHealthCheckEnabled() {
        return delegate.isHealthCheckEnabled();
    }

    /**
     * BookKeeper 4.18's (Pulsar 5.0) {@code isMetadataServiceAvailable}, a default method that line adds: the real
     * driver's answer where it has one. Not an override on 4.17, where nothing calls it.
     */
    @SuppressWarnings("unchecked")
    public CompletableFuture<Boolean> isMetadataServiceAvailable() {
        try {
            Method m = delegate.getClass().getMethod("isMetadataServiceAvailable");
            return (CompletableFuture<Boolean>) m.invoke(delegate);
        } catch (NoSuchMethodException e) {
            return CompletableFuture.completedFuture(true);
        } catch (ReflectiveOperationException e) {
            return CompletableFuture.failedFuture(e.getCause() != null ? e.getCause() : e);
        }
    }

    /** {@code real}, except that removing the metadata of a ledger the registry holds removes nothing. */
    static LedgerManager deferring(LedgerManager real, DeferredDeletes registry) {
        return proxy(LedgerManager.class, real, (target, method, args) -> {
            if (method.getName().equals("removeLedgerMetadata") && args != null && args.length == 2
                    && args[0] instanceof Long id) {
                return registry.claim(id).thenCompose(skip -> {
                    if (skip) {
                        Metrics.DEFERRED.inc();
                        log.info("[ledger-deletion] broker delete of ledger {} left to the worker (defer mode)", id);
                        return CompletableFuture.<Void>completedFuture(null);
                    }
                    return removeLedgerMetadata(target, method, args);
                });
            }
            return invoke(target, method, args);
        });
    }

    @SuppressWarnings("unchecked")
    private static CompletableFuture<Void> removeLedgerMetadata(Object target, Method method, Object[] args) {
        try {
            return (CompletableFuture<Void>) invoke(target, method, args);
        } catch (Throwable e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    private interface Handler {
        Object handle(Object real, Method method, Object[] args) throws Throwable;
    }

    private static <T> T proxy(Class<T> type, T real, Handler handler) {
        InvocationHandler h = (p, method, args) -> {
            if (method.getDeclaringClass() == Object.class) {
                return switch (method.getName()) {
                    case "equals" -> p == args[0];
                    case "hashCode" -> System.identityHashCode(p);
                    default -> "Deferring[" + real + "]";
                };
            }
            return handler.handle(real, method, args);
        };
        return type.cast(Proxy.newProxyInstance(type.getClassLoader(), new Class<?>[] {type}, h));
    }

    private static Object invoke(Object target, Method method, Object[] args) throws Throwable {
        try {
            return method.invoke(target, args);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }
}
