package org.ledgerdeletion.broker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.Proxy;
import java.net.URI;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.discover.RegistrationClient;
import org.apache.bookkeeper.meta.LayoutManager;
import org.apache.bookkeeper.meta.LedgerManager;
import org.apache.bookkeeper.meta.LedgerManagerFactory;
import org.apache.bookkeeper.meta.MetadataClientDriver;
import org.apache.bookkeeper.meta.MetadataDrivers;
import org.apache.bookkeeper.meta.exceptions.MetadataException;
import org.apache.bookkeeper.stats.NullStatsLogger;
import org.apache.bookkeeper.versioning.Version;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Defer mode's seam in the JVM: the driver BookKeeper picks by scheme for {@code ledgerdeletion:<real uri>},
 * delegating to the real driver BookKeeper picks for the real uri (here a fake one, registered under its own scheme,
 * whose ledger manager records every call), and the client factory that points a broker's clients at it.
 */
class DeferringMetadataDriverTest {
    private static final String REAL = "fake-ldw-test://127.0.0.1:2181/ledgers";
    static final List<String> CALLS = new CopyOnWriteArrayList<>();
    static volatile String initializedWith;

    /** The "real" driver: its ledger manager factory and ledger manager record every call and do nothing. */
    public static final class FakeDriver implements MetadataClientDriver {
        @Override
        public MetadataClientDriver initialize(ClientConfiguration conf, ScheduledExecutorService scheduler,
                                               org.apache.bookkeeper.stats.StatsLogger statsLogger,
                                               Optional<Object> ctx) throws MetadataException {
            try {
                initializedWith = conf.getMetadataServiceUri();
            } catch (Exception e) {
                throw new MetadataException(org.apache.bookkeeper.meta.exceptions.Code.METADATA_SERVICE_ERROR, e);
            }
            return this;
        }

        @Override
        public String getScheme() {
            return "fake-ldw-test";
        }

        @Override
        public RegistrationClient getRegistrationClient() {
            return null;
        }

        @Override
        public LedgerManagerFactory getLedgerManagerFactory() {
            return recording(LedgerManagerFactory.class, m -> m.equals("newLedgerManager")
                    ? recording(LedgerManager.class, n -> n.equals("removeLedgerMetadata")
                            ? CompletableFuture.completedFuture(null) : null) : null);
        }

        @Override
        public LayoutManager getLayoutManager() {
            return null;
        }

        @Override
        public void close() {
            CALLS.add("close");
        }

        @Override
        public void setSessionStateListener(SessionStateListener sessionStateListener) {
            CALLS.add("setSessionStateListener");
        }
    }

    interface Answer {
        Object of(String method);
    }

    static <T> T recording(Class<T> type, Answer answer) {
        return type.cast(Proxy.newProxyInstance(type.getClassLoader(), new Class<?>[] {type}, (p, m, args) -> {
            if (m.getDeclaringClass() == Object.class) {
                return m.getName().equals("equals") ? p == args[0] : m.getName().equals("hashCode")
                        ? System.identityHashCode(p) : "recording";
            }
            CALLS.add(m.getName() + (m.getName().equals("removeLedgerMetadata") ? "(" + args[0] + ")" : ""));
            return answer.of(m.getName());
        }));
    }

    @BeforeAll
    static void registerTheFakeDriver() {
        MetadataDrivers.registerClientDriver("fake-ldw-test", FakeDriver.class);
        DeferringMetadataDriver.register();
    }

    private static MetadataClientDriver driver(ClientConfiguration conf) throws Exception {
        MetadataClientDriver d = MetadataDrivers.getClientDriver(URI.create(conf.getMetadataServiceUri()));
        return d.initialize(conf, null, NullStatsLogger.INSTANCE, Optional.empty());
    }

    private static ClientConfiguration conf(DeferredDeletes registry) {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(DeferringMetadataDriver.uriFor(REAL));
        conf.setProperty(DeferringMetadataDriver.REGISTRY_PROPERTY, registry);
        return conf;
    }

    @Test
    void bookKeeperPicksItForItsSchemeAndItInitialisesTheRealDriverWithTheRealUri() throws Exception {
        ClientConfiguration conf = conf(new DeferredDeletes(10));
        MetadataClientDriver d = driver(conf);
        assertInstanceOf(DeferringMetadataDriver.class, d);
        assertEquals(REAL, initializedWith);
        assertEquals(REAL, conf.getMetadataServiceUri(), "the client's configuration names the real store again");
        assertEquals("fake-ldw-test", d.getScheme());
        assertEquals(Boolean.TRUE, ((DeferringMetadataDriver) d).isMetadataServiceAvailable().get());
    }

    @Test
    void aRecordedLedgersMetadataIsNotRemovedAndEveryOtherIs() throws Exception {
        DeferredDeletes registry = new DeferredDeletes(10);
        LedgerManager lm = driver(conf(registry)).getLedgerManagerFactory().newLedgerManager();
        registry.record(List.of(42L));
        double deferred = Metrics.DEFERRED.get();
        CALLS.clear();
        assertNull(lm.removeLedgerMetadata(42L, Version.ANY).get(5, TimeUnit.SECONDS));
        assertEquals(List.of(), CALLS, "left to the worker: nothing removed");
        assertEquals(deferred + 1, Metrics.DEFERRED.get());
        lm.removeLedgerMetadata(42L, Version.ANY).get(5, TimeUnit.SECONDS);
        lm.removeLedgerMetadata(43L, Version.ANY).get(5, TimeUnit.SECONDS);
        assertEquals(List.of("removeLedgerMetadata(42)", "removeLedgerMetadata(43)"), CALLS,
                "a second delete of it, and any other ledger's, go to the real store");
    }

    @Test
    void everyOtherCallGoesToTheRealDriverAndLedgerManager() throws Exception {
        MetadataClientDriver d = driver(conf(new DeferredDeletes(10)));
        LedgerManagerFactory factory = d.getLedgerManagerFactory();
        assertSame(factory, d.getLedgerManagerFactory());
        LedgerManager lm = factory.newLedgerManager();
        CALLS.clear();
        int checked = 0;
        for (Method m : LedgerManager.class.getMethods()) {
            if (m.getName().equals("removeLedgerMetadata") || m.isDefault() || Modifier.isStatic(m.getModifiers())) {
                continue;
            }
            Object[] args = new Object[m.getParameterCount()];
            for (int i = 0; i < args.length; i++) {
                Class<?> t = m.getParameterTypes()[i];
                args[i] = t == long.class ? (Object) 7L : t == int.class ? (Object) 0 : t == boolean.class ? false
                        : null;
            }
            m.invoke(lm, args);
            assertEquals(m.getName(), CALLS.get(CALLS.size() - 1));
            checked++;
        }
        assertTrue(checked >= 7, "checked " + checked);
        factory.newLedgerIdGenerator();
        assertEquals("newLedgerIdGenerator", CALLS.get(CALLS.size() - 1));
        d.setSessionStateListener(() -> { });
        d.close();
        assertEquals(List.of("setSessionStateListener", "close"), CALLS.subList(CALLS.size() - 2, CALLS.size()));
    }

    @Test
    void withoutItsRegistryOrItsSchemeItRefusesToStart() {
        ClientConfiguration none = new ClientConfiguration();
        none.setMetadataServiceUri(DeferringMetadataDriver.uriFor(REAL));
        assertThrows(MetadataException.class, () -> driver(none));
        ClientConfiguration other = conf(new DeferredDeletes(1));
        other.setMetadataServiceUri(REAL);
        assertThrows(MetadataException.class, () -> new DeferringMetadataDriver().initialize(other, null,
                NullStatsLogger.INSTANCE, Optional.empty()));
    }

    @Test
    void theClientFactoryPointsEveryClientAtIt() {
        DeferredDeletes registry = new DeferredDeletes(1);
        ServiceConfiguration conf = new ServiceConfiguration();
        conf.setMetadataStoreUrl("zk:127.0.0.1:2181");
        var factory = new DeferringBookKeeperClientFactory(null, registry);
        Map<String, Object> props = factory.deferring(conf, null);
        assertEquals("ledgerdeletion:metadata-store:zk:127.0.0.1:2181/ledgers", props.get("metadataServiceUri"));
        assertSame(registry, props.get(DeferringMetadataDriver.REGISTRY_PROPERTY));
        // A placement policy's own properties are kept; its own uri, or broker.conf's bookkeeper_ override, wins.
        props = factory.deferring(conf, Map.of("reppDnsResolverClass", "x"));
        assertEquals("x", props.get("reppDnsResolverClass"));
        conf.getProperties().setProperty("bookkeeper_metadataServiceUri", "zk+hierarchical://h:2181/ledgers");
        assertEquals("ledgerdeletion:zk+hierarchical://h:2181/ledgers", factory.deferring(conf, null)
                .get("metadataServiceUri"));
        assertEquals("ledgerdeletion:zk://o/ledgers", factory.deferring(conf, Map.of("metadataServiceUri",
                "zk://o/ledgers")).get("metadataServiceUri"));
    }
}
