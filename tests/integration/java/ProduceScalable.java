// Produces to a Pulsar 5.0 scalable topic (PIP-460) through the V5 client, which routes each message by its
// key's hash to one of the topic's segments (the v4 clients refuse topic:// and segment:// names). Run with
// an assembled 5.x Pulsar's jars (deploy/local/stack.sh adds pulsar-client-v5 to them):
//   java -cp 'apache-pulsar-5.X/lib/*' ProduceScalable.java <service-url> topic://tenant/ns/name <count>
// Prints SENT=<count> once every message is acknowledged by its segment's broker.
import java.nio.charset.StandardCharsets;
import org.apache.pulsar.client.api.v5.Producer;
import org.apache.pulsar.client.api.v5.PulsarClient;
import org.apache.pulsar.client.api.v5.schema.Schema;

public class ProduceScalable {
    public static void main(String[] args) throws Exception {
        int count = Integer.parseInt(args[2]);
        try (PulsarClient client = PulsarClient.builder().serviceUrl(args[0]).build();
             Producer<byte[]> producer = client.newProducer(Schema.bytes()).topic(args[1]).create()) {
            for (int i = 0; i < count; i++) {
                producer.newMessage().key("key-" + i).value(("message-" + i).getBytes(StandardCharsets.UTF_8)).send();
            }
        }
        System.out.println("SENT=" + count);
    }
}
