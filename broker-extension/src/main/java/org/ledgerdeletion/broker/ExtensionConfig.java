package org.ledgerdeletion.broker;

import java.util.LinkedHashSet;
import java.util.Properties;
import java.util.Set;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.apache.pulsar.common.naming.TopicName;

/**
 * The extension's broker.conf keys (read from the broker's configuration, whose unknown keys Pulsar keeps
 * as properties). Defaults match the worker's (config/worker.example.yaml: topics.*, worker.send_delay_s).
 */
public record ExtensionConfig(
        boolean enabled,
        String pendingTopic,
        int partitions,
        String subscription,
        long sendDelayMs,
        long maxWaitMs,
        long sendTimeoutMs,
        String serviceUrl,
        String webServiceUrl,
        String authPlugin,
        String authParams,
        Set<String> excludedNamespaces,
        String markKeyFile,
        boolean deferBrokerDeletes,
        int deferMaxLedgers) {

    public static final String PREFIX = "ledgerDeletion";
    /** The broker.conf key naming the file of the key that signs every message ({@link MarkSigner}). */
    public static final String MARK_KEY_FILE = PREFIX + "MarkKeyFile";
    /** The broker.conf key of defer mode: the broker leaves the BookKeeper copies it queued to the worker. */
    public static final String DEFER_BROKER_DELETES = PREFIX + "DeferBrokerDeletes";

    public static ExtensionConfig from(ServiceConfiguration conf) {
        Properties p = conf.getProperties();
        // The broker's own listener: its bind address, or loopback when it binds every interface (a lookup
        // then redirects to whichever broker owns the queue partition).
        String bind = conf.getBindAddress();
        String host = bind == null || bind.isBlank() || "0.0.0.0".equals(bind) || "::".equals(bind)
                ? "127.0.0.1" : bind;
        int brokerPort = conf.getBrokerServicePort().orElse(6650);
        int webPort = conf.getWebServicePort().orElse(8080);
        return of(p, "pulsar://" + host + ":" + brokerPort, "http://" + host + ":" + webPort,
                conf.getBrokerClientAuthenticationPlugin(), conf.getBrokerClientAuthenticationParameters());
    }

    static ExtensionConfig of(Properties p, String defaultServiceUrl, String defaultWebUrl, String authPlugin,
                              String authParams) {
        String pending = get(p, "PendingTopic", "persistent://pulsar/system/__ledger_deletion");
        Set<String> excluded = new LinkedHashSet<>();
        // The queue's own namespace always: its topics' ledgers must never be queued (no feedback loop), and
        // loading a queue partition needs that namespace's system topics (__change_events): a trim of those
        // waiting for the queue would wait for itself.
        excluded.add(TopicName.get(pending).getNamespace());
        for (String ns : get(p, "ExcludedNamespaces", "").split(",")) {
            if (!ns.isBlank()) {
                excluded.add(ns.strip());
            }
        }
        String plugin = get(p, "AuthPlugin", authPlugin == null ? "" : authPlugin);
        String params = get(p, "AuthParams", authParams == null ? "" : authParams);
        return new ExtensionConfig(
                Boolean.parseBoolean(get(p, "Enabled", "true")),
                pending,
                Integer.parseInt(get(p, "Partitions", "4")),
                get(p, "Subscription", "ledger-deletion-worker"),
                (long) (Double.parseDouble(get(p, "SendDelaySeconds", "60")) * 1000),
                (long) (Double.parseDouble(get(p, "MaxWaitSeconds", "10")) * 1000),
                (long) (Double.parseDouble(get(p, "SendTimeoutSeconds", "5")) * 1000),
                get(p, "ServiceUrl", defaultServiceUrl),
                get(p, "WebServiceUrl", defaultWebUrl),
                plugin,
                params,
                Set.copyOf(excluded),
                get(p, "MarkKeyFile", ""),
                Boolean.parseBoolean(get(p, "DeferBrokerDeletes", "false")),
                positive(p, "DeferMaxLedgers", 100_000));
    }

    private static int positive(Properties p, String key, int dflt) {
        String v = get(p, key, Integer.toString(dflt));
        try {
            int n = Integer.parseInt(v);
            if (n > 0) {
                return n;
            }
        } catch (NumberFormatException e) {
            // below
        }
        throw new IllegalArgumentException(PREFIX + key + " must be a positive integer, not '" + v + "'");
    }

    private static String get(Properties p, String key, String dflt) {
        String v = p.getProperty(PREFIX + key);
        return v == null || v.isBlank() ? dflt : v.strip();
    }

    /**
     * Whether a managed ledger's ledgers bypass the extension: those of the queue's namespace and any configured
     * one, and those whose name the worker's messages do not carry ({@link ManagedLedgerName}: version-1 names
     * such as the broker's own heartbeat topic, pulsar/&lt;cluster&gt;/&lt;host:port&gt;/persistent/healthcheck).
     */
    public boolean excluded(String managedLedgerName) {
        return ManagedLedgerName.parse(managedLedgerName).map(n -> excludedNamespaces.contains(n.namespace()))
                .orElse(true);
    }

    /** {@link #excluded} for a topic named as such ({@code persistent://tenant/ns/topic}). */
    public boolean excludedTopic(String topic) {
        return ManagedLedgerName.ofTopic(topic).map(n -> excludedNamespaces.contains(n.namespace())).orElse(true);
    }
}
