// Creates many real BookKeeper ledgers with chosen custom metadata, pipelined: the benchmark needs
// thousands, and tests/integration/java/CreateLedger.java makes them one after the other (~40 ms each on
// the local stack: create + each add + close is a round trip). Same ledgers (ensemble 1, CRC32C, empty
// password, `entries` entries, closed), same output: one LEDGER_ID=<id> line per ledger.
//   java -cp 'apache-pulsar-X/lib/*' CreateLedgers.java <zk-hosts> <count> <entries> <in-flight> [key=value ...]
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.WriteHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public class CreateLedgers {
    public static void main(String[] args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri("zk+null://" + args[0] + "/ledgers");
        int count = Integer.parseInt(args[1]);
        int entries = Integer.parseInt(args[2]);
        int inflight = Integer.parseInt(args[3]);
        Map<String, byte[]> custom = new HashMap<>();
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            custom.put(kv[0], kv[1].getBytes(StandardCharsets.UTF_8));
        }
        Semaphore permits = new Semaphore(inflight);
        ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
        BookKeeper bk = new BookKeeper(conf);
        try {
            for (int n = 0; n < count && errors.isEmpty(); n++) {
                if (!permits.tryAcquire(120, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("no ledger completed within 120 s");
                }
                bk.newCreateLedgerOp()
                        .withEnsembleSize(1)
                        .withWriteQuorumSize(1)
                        .withAckQuorumSize(1)
                        .withDigestType(DigestType.CRC32C)
                        .withPassword(new byte[0])
                        .withCustomMetadata(custom)
                        .execute()
                        .thenCompose(wh -> fill(wh, entries).thenCompose(v -> wh.closeAsync()).thenApply(v -> wh.getId()))
                        .whenComplete((id, err) -> {
                            if (err != null) {
                                errors.add(err);
                            } else {
                                synchronized (System.out) {
                                    System.out.println("LEDGER_ID=" + id);
                                }
                            }
                            permits.release();
                        });
            }
            if (!permits.tryAcquire(inflight, 120, TimeUnit.SECONDS)) {
                throw new IllegalStateException("ledgers still being written after 120 s");
            }
        } finally {
            System.out.flush();
            bk.close();
        }
        if (!errors.isEmpty()) {
            errors.peek().printStackTrace();
            System.exit(1);
        }
    }

    private static CompletableFuture<Void> fill(WriteHandle wh, int entries) {
        CompletableFuture<?>[] adds = new CompletableFuture<?>[entries];
        for (int i = 0; i < entries; i++) {
            adds[i] = wh.appendAsync(("entry-" + i).getBytes(StandardCharsets.UTF_8));
        }
        return CompletableFuture.allOf(adds);
    }
}
