// Recovers ledgers with BookKeeper's own recovery open (BookKeeper.openLedger, as a broker opens the last
// ledger of a topic it loads), to compare the worker's recovery with BookKeeper's. Run with the Pulsar
// distribution's jars:
//   java -cp 'apache-pulsar-X/lib/*' RecoverLedger.java <zk-hosts> <ledger-id> [<ledger-id> ...]
// Prints RECOVERED=<id>,<last entry id>,<length> per ledger. DIGEST and PASSWORD as in CreateLedger.java.
import java.nio.charset.StandardCharsets;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public class RecoverLedger {
    public static void main(String[] args) throws Exception {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri("zk+null://" + args[0] + "/ledgers");
        conf.setReadEntryTimeout(30);
        conf.setZkTimeout(30_000);
        BookKeeper.DigestType digest = BookKeeper.DigestType.valueOf(
            System.getenv().getOrDefault("DIGEST", "CRC32C"));
        byte[] password = System.getenv().getOrDefault("PASSWORD", "").getBytes(StandardCharsets.UTF_8);
        int rc = 0;
        try {
            BookKeeper bk = new BookKeeper(conf);
            for (int i = 1; i < args.length; i++) {
                LedgerHandle lh = bk.openLedger(Long.parseLong(args[i]), digest, password);
                System.out.println("RECOVERED=" + lh.getId() + "," + lh.getLastAddConfirmed() + "," + lh.getLength());
            }
        } catch (Throwable t) {
            t.printStackTrace();
            rc = 1;
        }
        System.out.flush();
        // halt: a client thread left running must not keep the JVM alive (see CreateLedger.java).
        Runtime.getRuntime().halt(rc);
    }
}
