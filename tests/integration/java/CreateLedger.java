// Creates a real BookKeeper ledger with chosen custom metadata, for tests that need a ledger Pulsar did
// not make (a non-Pulsar ledger, or a forged one). Run with the Pulsar distribution's jars:
//   java -cp 'apache-pulsar-X/lib/*' CreateLedger.java <zk-hosts> <count> <entries> [key=value ...]
// Prints one LEDGER_ID=<id> line per ledger created. With LEAVE_OPEN=1 in the environment the ledgers are
// never closed (their metadata stays OPEN, as a writer's that is still running or that died). With
// KEEP_WRITING=<seconds> (one ledger) the writer stays alive after its entries and adds one more every 50 ms,
// printing ADDED=<entry id> for each confirmed add, until an add fails (ADD_FAILED=<exception class>: a
// fenced ledger) or the time is up (WRITER_DONE). DIGEST (CRC32C, CRC32, MAC, DUMMY) and PASSWORD choose the
// ledger's digest type and password (default: Pulsar's, CRC32C and empty).
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public class CreateLedger {
    public static void main(String[] args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri("zk+null://" + args[0] + "/ledgers");
        int count = Integer.parseInt(args[1]);
        int entries = Integer.parseInt(args[2]);
        Map<String, byte[]> custom = new HashMap<>();
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            custom.put(kv[0], kv[1].getBytes(StandardCharsets.UTF_8));
        }
        boolean leaveOpen = "1".equals(System.getenv("LEAVE_OPEN"));
        String keepWriting = System.getenv("KEEP_WRITING");
        long writeForMs = keepWriting == null || keepWriting.isEmpty() ? 0 : Long.parseLong(keepWriting) * 1000;
        leaveOpen |= writeForMs > 0;
        BookKeeper.DigestType digest = BookKeeper.DigestType.valueOf(
            System.getenv().getOrDefault("DIGEST", "CRC32C"));
        byte[] password = System.getenv().getOrDefault("PASSWORD", "").getBytes(StandardCharsets.UTF_8);
        // Bounded waits: a bookie that stops answering fails this run in seconds instead of hanging the test.
        conf.setAddEntryTimeout(30);
        conf.setReadEntryTimeout(30);
        conf.setZkTimeout(30_000);
        int rc = 0;
        BookKeeper bk = null;
        try {
            bk = new BookKeeper(conf);
            for (int n = 0; n < count; n++) {
                LedgerHandle lh = bk.createLedger(1, 1, 1, digest, password, custom);
                for (int i = 0; i < entries; i++) {
                    lh.addEntry(("entry-" + i).getBytes(StandardCharsets.UTF_8));
                }
                if (!leaveOpen) {
                    lh.close();
                }
                System.out.println("LEDGER_ID=" + lh.getId());
                System.out.flush();
                if (writeForMs > 0) {
                    keepWriting(lh, writeForMs);
                }
            }
        } catch (Throwable t) {
            // Printed before any close: a close that throws too must not hide the first failure.
            t.printStackTrace();
            rc = 1;
        }
        System.out.flush();
        if (bk != null && !leaveOpen) {
            try {
                bk.close();
            } catch (Throwable t) {
                // Seen once under load (an NPE in the bookie client pool's close): the ledgers above are
                // already closed, so the run's result stands.
                t.printStackTrace();
            }
        }
        // halt, not return: a client thread left running after a failed close kept the JVM alive for the
        // test's whole timeout. With LEAVE_OPEN nothing may close the ledgers, so no close ran above.
        Runtime.getRuntime().halt(rc);
    }

    // A live writer: its adds must start failing once another client fences the ledger.
    private static void keepWriting(LedgerHandle lh, long forMs) throws InterruptedException {
        long until = System.currentTimeMillis() + forMs;
        while (System.currentTimeMillis() < until) {
            try {
                long id = lh.addEntry(("more-" + System.nanoTime()).getBytes(StandardCharsets.UTF_8));
                System.out.println("ADDED=" + id);
            } catch (Exception e) {
                System.out.println("ADD_FAILED=" + e.getClass().getName());
                System.out.flush();
                return;
            }
            System.out.flush();
            Thread.sleep(50);
        }
        System.out.println("WRITER_DONE");
        System.out.flush();
    }
}
