// Cross-check helper for tests/wire/test_wire_java.py: Kafka's own generated Java message
// classes (kafka-clients) decode our bytes and encode them again.
//
// stdin, one case per line:   <MessageName> <version> <hex>
// stdout, one line per case:  OK <hex re-encoded by Java> | SKIP <reason> | ERR <exception>
// "RANGE <MessageName>" prints "RANGE <lowest> <highest>" (the versions this jar supports).
import java.io.*;
import java.nio.ByteBuffer;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;

public class WireCheck {
  static Class<?> find(String name) {
    try { return Class.forName("org.apache.kafka.common.message." + name + "Data"); }
    catch (ClassNotFoundException e) { return null; }
  }

  static String hex(ByteBuffer b) {
    StringBuilder sb = new StringBuilder();
    while (b.hasRemaining()) sb.append(String.format("%02x", b.get() & 0xff));
    return sb.toString();
  }

  static byte[] unhex(String s) {
    byte[] out = new byte[s.length() / 2];
    for (int i = 0; i < out.length; i++) out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    return out;
  }

  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    PrintStream out = new PrintStream(new BufferedOutputStream(System.out), false);
    String line;
    while ((line = in.readLine()) != null) {
      String[] p = line.trim().split(" ");
      try {
        Class<?> c = find(p[p[0].equals("RANGE") ? 1 : 0]);
        if (c == null) { out.println("SKIP no class"); continue; }
        Message m = (Message) c.getConstructor().newInstance();
        if (p[0].equals("RANGE")) {
          out.println("RANGE " + m.lowestSupportedVersion() + " " + m.highestSupportedVersion());
          continue;
        }
        short v = Short.parseShort(p[1]);
        byte[] data = unhex(p.length > 2 ? p[2] : "");
        Message r = (Message) c.getConstructor(Readable.class, short.class)
            .newInstance(new ByteBufferAccessor(ByteBuffer.wrap(data)), v);
        ObjectSerializationCache cache = new ObjectSerializationCache();
        ByteBuffer buf = ByteBuffer.allocate(r.size(cache, v));
        r.write(new ByteBufferAccessor(buf), cache, v);
        buf.flip();
        out.println("OK " + hex(buf));
      } catch (java.lang.reflect.InvocationTargetException e) {
        out.println("ERR " + e.getCause());
      } catch (Exception e) {
        out.println("ERR " + e);
      } finally {
        out.flush();   // the caller reads one answer per line as it goes
      }
    }
    out.flush();
  }
}
