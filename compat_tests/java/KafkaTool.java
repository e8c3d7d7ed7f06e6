// A small command-line driver for the Java Kafka client, used by compat_tests.
// Records travel as tab-separated lines with hex-encoded bytes, so Python can compare exactly:
//   produce input:  key_hex \t value_hex \t timestamp_ms \t headers   ("-" for null)
//   consume output: partition \t offset \t timestamp_ms \t key_hex \t value_hex \t headers
//   headers:        name=hex,name=hex  ("" for none; name is plain ASCII in our tests)
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.*;

public class KafkaTool {
    static final HexFormat HEX = HexFormat.of();

    static byte[] unhex(String s) { return s.equals("-") ? null : HEX.parseHex(s); }
    static String hex(byte[] b) { return b == null ? "-" : HEX.formatHex(b); }

    static Properties props(String bootstrap, String[] extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        for (String kv : extra) {
            int i = kv.indexOf('=');
            p.put(kv.substring(0, i), kv.substring(i + 1));
        }
        return p;
    }

    public static void main(String[] args) throws Exception {
        String cmd = args[0], bootstrap = args[1];
        String[] rest = Arrays.copyOfRange(args, 2, args.length);
        switch (cmd) {
            case "produce" -> produce(bootstrap, rest);
            case "consume" -> consume(bootstrap, rest);
            case "group-consume" -> groupConsume(bootstrap, rest);
            case "create-topic" -> createTopic(bootstrap, rest);
            case "delete-topic" -> deleteTopic(bootstrap, rest);
            case "list-topics" -> listTopics(bootstrap);
            case "describe-cluster" -> describeCluster(bootstrap);
            case "describe-configs" -> describeConfigs(bootstrap, rest);
            case "alter-config" -> alterConfig(bootstrap, rest);
            case "latest-offsets" -> latestOffsets(bootstrap, rest);
            case "admin-suite" -> AdminSuite.run(bootstrap, rest[0]);
            case "group-member" -> GroupMember.run(bootstrap, rest);
            case "txn-copy" -> TxnTool.copy(bootstrap, rest);
            case "txn-fence" -> TxnTool.fence(bootstrap, rest);
            case "load" -> LoadTool.run(bootstrap, rest);
            default -> throw new IllegalArgumentException("unknown command " + cmd);
        }
    }

    // produce TOPIC [prop=value ...] < records.tsv ; prints "partition \t offset" per record, in input order
    static void produce(String bootstrap, String[] a) throws Exception {
        Properties p = props(bootstrap, Arrays.copyOfRange(a, 1, a.length));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        try (Producer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isEmpty()) continue;
                String[] f = line.split("\t", -1);
                List<Header> headers = new ArrayList<>();
                if (!f[3].isEmpty()) {
                    for (String h : f[3].split(",")) {
                        int i = h.indexOf('=');
                        headers.add(new RecordHeader(h.substring(0, i), unhex(h.substring(i + 1))));
                    }
                }
                acks.add(producer.send(new ProducerRecord<>(a[0], null, Long.parseLong(f[2]),
                    unhex(f[0]), unhex(f[1]), headers)));
            }
            producer.flush();
            for (Future<RecordMetadata> f : acks) {
                RecordMetadata m = f.get();
                System.out.println(m.partition() + "\t" + m.offset());
            }
        }
    }

    static void printRecord(ConsumerRecord<byte[], byte[]> r) {
        StringBuilder h = new StringBuilder();
        for (Header x : r.headers()) {
            if (h.length() > 0) h.append(',');
            h.append(x.key()).append('=').append(hex(x.value()));
        }
        System.out.println(r.partition() + "\t" + r.offset() + "\t" + r.timestamp() + "\t"
            + hex(r.key()) + "\t" + hex(r.value()) + "\t" + h);
    }

    // consume TOPIC COUNT [prop=value ...] : assign every partition, read COUNT records from the start
    static void consume(String bootstrap, String[] a) throws Exception {
        Properties p = props(bootstrap, Arrays.copyOfRange(a, 2, a.length));
        p.putIfAbsent("auto.offset.reset", "earliest");
        p.putIfAbsent("enable.auto.commit", "false");
        long want = Long.parseLong(a[1]);
        try (Consumer<byte[], byte[]> c =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(a[0])) tps.add(new TopicPartition(a[0], pi.partition()));
            c.assign(tps);
            c.seekToBeginning(tps);
            long got = 0, deadline = System.currentTimeMillis() + 60_000;
            while (got < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) { printRecord(r); got++; }
            }
        }
    }

    // group-consume TOPIC GROUP COUNT [prop=value ...] : subscribe in a group, commit after processing
    static void groupConsume(String bootstrap, String[] a) throws Exception {
        Properties p = props(bootstrap, Arrays.copyOfRange(a, 3, a.length));
        p.put("group.id", a[1]);
        p.putIfAbsent("auto.offset.reset", "earliest");
        p.putIfAbsent("enable.auto.commit", "false");
        long want = Long.parseLong(a[2]);
        try (Consumer<byte[], byte[]> c =
                 new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            c.subscribe(List.of(a[0]));
            long got = 0, deadline = System.currentTimeMillis() + 90_000;
            while (got < want && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : rs) { printRecord(r); got++; }
                if (!rs.isEmpty()) c.commitSync();
            }
        }
    }

    static Admin admin(String bootstrap) { return Admin.create(props(bootstrap, new String[0])); }

    // create-topic TOPIC PARTITIONS [config=value ...]
    static void createTopic(String bootstrap, String[] a) throws Exception {
        Map<String, String> configs = new HashMap<>();
        for (int i = 2; i < a.length; i++) { String[] kv = a[i].split("=", 2); configs.put(kv[0], kv[1]); }
        try (Admin admin = admin(bootstrap)) {
            NewTopic t = new NewTopic(a[0], Integer.parseInt(a[1]), (short) 1).configs(configs);
            admin.createTopics(List.of(t)).all().get(30, TimeUnit.SECONDS);
            System.out.println("created\t" + a[0]);
        }
    }

    static void deleteTopic(String bootstrap, String[] a) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            admin.deleteTopics(List.of(a[0])).all().get(30, TimeUnit.SECONDS);
            System.out.println("deleted\t" + a[0]);
        }
    }

    // describe-cluster : "cluster <id>", "controller <id>", "node <id>" per node, then the
    // metadata quorum: "quorum <leader> <epoch> <hw>" and "voter <id> <log end offset>" lines
    static void describeCluster(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            DescribeClusterResult c = admin.describeCluster();
            System.out.println("cluster " + c.clusterId().get(30, TimeUnit.SECONDS));
            System.out.println("controller " + c.controller().get(30, TimeUnit.SECONDS).id());
            for (Node n : c.nodes().get(30, TimeUnit.SECONDS)) System.out.println("node " + n.id());
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get(30, TimeUnit.SECONDS);
            System.out.println("quorum " + q.leaderId() + " " + q.leaderEpoch() + " " + q.highWatermark());
            for (QuorumInfo.ReplicaState r : q.voters()) System.out.println("voter " + r.replicaId() + " " + r.logEndOffset());
        }
    }

    static void listTopics(String bootstrap) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            for (String t : new TreeSet<>(admin.listTopics().names().get(30, TimeUnit.SECONDS))) System.out.println(t);
        }
    }

    // describe-configs TOPIC : "name \t value \t source" per entry
    static void describeConfigs(String bootstrap, String[] a) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, a[0]);
            Config cfg = admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r);
            for (ConfigEntry e : cfg.entries()) System.out.println(e.name() + "\t" + e.value() + "\t" + e.source());
        }
    }

    // alter-config TOPIC name=value : incremental SET
    static void alterConfig(String bootstrap, String[] a) throws Exception {
        String[] kv = a[1].split("=", 2);
        try (Admin admin = admin(bootstrap)) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, a[0]);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry(kv[0], kv[1]), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(r, List.of(op))).all().get(30, TimeUnit.SECONDS);
            System.out.println("altered\t" + a[0]);
        }
    }

    // latest-offsets TOPIC : "partition \t offset" via ListOffsets(latest)
    static void latestOffsets(String bootstrap, String[] a) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            TopicDescription d = admin.describeTopics(List.of(a[0])).allTopicNames().get(30, TimeUnit.SECONDS).get(a[0]);
            Map<TopicPartition, OffsetSpec> q = new HashMap<>();
            for (TopicPartitionInfo pi : d.partitions()) q.put(new TopicPartition(a[0], pi.partition()), OffsetSpec.latest());
            var res = admin.listOffsets(q).all().get(30, TimeUnit.SECONDS);
            for (var e : new TreeMap<Integer, Long>(res.entrySet().stream().collect(
                    java.util.stream.Collectors.toMap(x -> x.getKey().partition(), x -> x.getValue().offset()))).entrySet())
                System.out.println(e.getKey() + "\t" + e.getValue());
        }
    }
}

// admin-suite TOPIC : the admin APIs of issue 4 in one JVM, one "key \t value..." line per check
class AdminSuite {
    static void out(Object... f) {
        StringBuilder b = new StringBuilder();
        for (Object x : f) { if (b.length() > 0) b.append('\t'); b.append(x); }
        System.out.println(b);
    }

    static String errorName(Exception e) {
        Throwable c = e instanceof ExecutionException ? e.getCause() : e;
        return c.getClass().getSimpleName();
    }

    static void run(String bootstrap, String topic) throws Exception {
        try (Admin admin = KafkaTool.admin(bootstrap)) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get(30, TimeUnit.SECONDS);
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(4))).all().get(30, TimeUnit.SECONDS);
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS).get(topic);
            out("partitions", d.partitions().size(), d.partitions().get(3).leader().id(), d.topicId());
            try {
                admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get(30, TimeUnit.SECONDS);
                out("shrink", "accepted");
            } catch (ExecutionException e) { out("shrink", errorName(e)); }

            ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND))))
                .all().get(30, TimeUnit.SECONDS);
            Config cfg = admin.describeConfigs(List.of(r), new DescribeConfigsOptions().includeSynonyms(true)
                .includeDocumentation(true)).all().get(30, TimeUnit.SECONDS).get(r);
            for (String n : List.of("retention.ms", "cleanup.policy", "segment.bytes")) {
                ConfigEntry e = cfg.get(n);
                StringBuilder syn = new StringBuilder();
                for (ConfigEntry.ConfigSynonym s : e.synonyms())
                    syn.append(s.name()).append('=').append(s.value()).append(':').append(s.source()).append(',');
                out("config", n, e.value(), e.source(), e.type(), syn);
            }
            try {
                admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(
                    new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get(30, TimeUnit.SECONDS);
                out("badconfig", "accepted");
            } catch (ExecutionException e) { out("badconfig", errorName(e)); }
            ConfigResource b = new ConfigResource(ConfigResource.Type.BROKER, "1");
            ConfigEntry nparts = admin.describeConfigs(List.of(b)).all().get(30, TimeUnit.SECONDS).get(b).get("num.partitions");
            out("broker", nparts.value(), nparts.source(), nparts.isReadOnly());

            Properties pp = KafkaTool.props(bootstrap, new String[0]);
            try (Producer<byte[], byte[]> p = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
                // Keyed: the topic is compacted by now, and compacted topics refuse keyless records.
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < 10; i++)
                    sent.add(p.send(new ProducerRecord<>(topic, 0, ("k" + i).getBytes(), ("v" + i).getBytes())));
                for (Future<RecordMetadata> f : sent) f.get(30, TimeUnit.SECONDS);
            }
            TopicPartition tp0 = new TopicPartition(topic, 0);
            long low = admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(tp0)
                .get(30, TimeUnit.SECONDS).lowWatermark();
            long earliest = admin.listOffsets(Map.of(tp0, OffsetSpec.earliest())).all().get(30, TimeUnit.SECONDS).get(tp0).offset();
            out("deleted", low, earliest);
            try {
                admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(99))).all().get(30, TimeUnit.SECONDS);
                out("beyond", "accepted");
            } catch (ExecutionException e) { out("beyond", errorName(e)); }

            DescribeClusterResult c = admin.describeCluster();
            out("cluster", c.clusterId().get(), c.controller().get().id(), c.nodes().get().size());
            var dirs = admin.describeLogDirs(List.of(1)).allDescriptions().get(30, TimeUnit.SECONDS).get(1);
            for (var e : dirs.entrySet()) {
                var ri = e.getValue().replicaInfos().get(tp0);
                out("logdir", ri == null ? -1 : ri.size(), e.getValue().totalBytes().isPresent());
            }

            // seek with a leader epoch: the consumer validates the position with OffsetsForLeaderEpoch
            Properties cp = KafkaTool.props(bootstrap, new String[0]);
            cp.put("enable.auto.commit", "false");
            try (Consumer<byte[], byte[]> con = new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                con.assign(List.of(tp0));
                con.seek(tp0, new OffsetAndMetadata(6, Optional.of(0), ""));
                long first = -1, deadline = System.currentTimeMillis() + 30_000;
                while (first < 0 && System.currentTimeMillis() < deadline)
                    for (ConsumerRecord<byte[], byte[]> rec : con.poll(Duration.ofMillis(500))) { if (first < 0) first = rec.offset(); }
                out("seek", first);
            }
        }
    }
}

// group-member TOPICS GROUP [prop=value ...] : one long-lived group member driven over stdin/stdout,
// so a test can run several side by side, close one, add another, and watch its rebalance listener.
//   TOPICS: comma-separated names, or a regex with subscribe.mode=pattern (java.util.regex.Pattern,
//           matched by the client) or subscribe.mode=re2j (SubscriptionPattern, matched by the broker;
//           kafka-clients 4.x only)
//   stdin:  "close" (or EOF) closes the consumer (it leaves the group) and exits
//   stdout: "assigned|revoked|lost \t millis \t topic:p,topic:p" from the ConsumerRebalanceListener,
//           "rec \t topic \t partition \t offset \t value_hex" per record, then "committed \t millis"
//           after each commitSync of a poll's records, "closed" at the end; flushed per line
class GroupMember {
    static synchronized void out(Object... f) {
        StringBuilder b = new StringBuilder();
        for (Object x : f) { if (b.length() > 0) b.append('\t'); b.append(x); }
        System.out.println(b);
        System.out.flush();
    }

    static String tps(Collection<TopicPartition> ps) {
        List<String> l = new ArrayList<>();
        for (TopicPartition tp : ps) l.add(tp.topic() + ":" + tp.partition());
        Collections.sort(l);
        return String.join(",", l);
    }

    static void run(String bootstrap, String[] a) throws Exception {
        Properties p = KafkaTool.props(bootstrap, Arrays.copyOfRange(a, 2, a.length));
        String mode = (String) p.remove("subscribe.mode");
        p.put("group.id", a[1]);
        p.putIfAbsent("auto.offset.reset", "earliest");
        p.putIfAbsent("enable.auto.commit", "false");
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("close")) { }
            } catch (IOException e) { }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            public void onPartitionsRevoked(Collection<TopicPartition> ps) {
                if (!ps.isEmpty()) out("revoked", System.currentTimeMillis(), tps(ps));
            }
            public void onPartitionsAssigned(Collection<TopicPartition> ps) {
                if (!ps.isEmpty()) out("assigned", System.currentTimeMillis(), tps(ps));
            }
            public void onPartitionsLost(Collection<TopicPartition> ps) {
                if (!ps.isEmpty()) out("lost", System.currentTimeMillis(), tps(ps));
            }
        };
        try (Consumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            if ("pattern".equals(mode)) c.subscribe(java.util.regex.Pattern.compile(a[0]), listener);
            else if ("re2j".equals(mode)) {
                // by reflection: SubscriptionPattern is new in 4.0 and this file also builds against 3.9
                Class<?> sp = Class.forName("org.apache.kafka.clients.consumer.SubscriptionPattern");
                Object pattern = sp.getConstructor(String.class).newInstance(a[0]);
                Consumer.class.getMethod("subscribe", sp, ConsumerRebalanceListener.class).invoke(c, pattern, listener);
            }
            else c.subscribe(Arrays.asList(a[0].split(",")), listener);
            out("ready", System.currentTimeMillis());
            while (!stop.get()) {
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> r : rs)
                    out("rec", r.topic(), r.partition(), r.offset(), KafkaTool.hex(r.value()));
                if (!rs.isEmpty()) {
                    c.commitSync();
                    out("committed", System.currentTimeMillis());
                }
            }
        }
        out("closed", System.currentTimeMillis());
    }
}

// Transactions (issue 6), one JVM per scenario; one "key \t value..." line per event, flushed.
//   txn-copy IN OUT GROUP TXID COUNT ABORT_EVERY [prop=value ...]
//     consume-transform-produce: a read_committed group consumer of IN, a transactional producer
//     writing each record's value to the same partition of OUT with header txn=<transaction no>
//     (ASCII), sendOffsetsToTransaction(offsets, groupMetadata()) then commit; every
//     ABORT_EVERY-th transaction (0: never) is flushed then aborted instead (so its records are in
//     the log, visible to read_uncommitted readers), the consumer seeks back to the
//     group's committed offsets and the records are redone. Stops after COUNT inputs committed.
//     stdout: "committed|aborted \t txn \t records \t p:offset,..." then "done \t total \t txns"
//     props: consumer.X=... / producer.X=... go to that client only, others to both;
//     tool.deadline.ms=N (default 75000), tool.records.per.s=R (spread the input over the run).
//     A transaction that fails (brokers dying under it) is aborted and redone: "failed \t txn
//     \t exception" then its "aborted" line; a commit or abort that times out is retried.
//   txn-fence TOPIC TXID [prop=value ...]
//     producer A: init, begin, send "a-1" and flush; producer B with the same transactional.id:
//     init (fences A, aborts its transaction); A's commitTransaction must fail:
//     "a-commit \t <exception simple name> \t <cause simple name>", then A's next beginTransaction/send:
//     "a-again \t <exception or ok>"; B sends "b-1" and commits: "b-committed \t <offset>"
class TxnTool {
    static synchronized void out(Object... f) {
        StringBuilder b = new StringBuilder();
        for (Object x : f) { if (b.length() > 0) b.append('\t'); b.append(x); }
        System.out.println(b);
        System.out.flush();
    }

    static Properties clientProps(String bootstrap, String[] extra, String role) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        for (String kv : extra) {
            int i = kv.indexOf('=');
            String k = kv.substring(0, i), v = kv.substring(i + 1);
            if (k.startsWith("consumer.") || k.startsWith("producer.")) {
                if (!k.startsWith(role + ".")) continue;
                k = k.substring(role.length() + 1);
            }
            p.put(k, v);
        }
        return p;
    }

    static String offsets(Map<TopicPartition, OffsetAndMetadata> m) {
        List<String> l = new ArrayList<>();
        for (var e : m.entrySet()) l.add(e.getKey().partition() + ":" + e.getValue().offset());
        Collections.sort(l);
        return String.join(",", l);
    }

    static void rewind(Consumer<byte[], byte[]> c) {
        Set<TopicPartition> parts = c.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = null;
        for (int i = 0; committed == null; i++) {
            try { committed = c.committed(parts, Duration.ofSeconds(30)); }
            catch (org.apache.kafka.common.errors.TimeoutException e) { if (i >= 5) throw e; }
        }
        for (TopicPartition tp : parts) {
            OffsetAndMetadata om = committed.get(tp);
            if (om != null) c.seek(tp, om.offset());
            else c.seekToBeginning(List.of(tp));
        }
    }

    static void retryOnTimeout(Runnable op) {
        for (int i = 0; ; i++) {
            try { op.run(); return; }
            catch (org.apache.kafka.common.errors.TimeoutException e) { if (i >= 10) throw e; }
        }
    }

    static void copy(String bootstrap, String[] a) throws Exception {
        String in = a[0], outTopic = a[1], group = a[2], txid = a[3];
        long count = Long.parseLong(a[4]);
        int abortEvery = Integer.parseInt(a[5]);
        long deadlineMs = 75_000;
        double rate = 0;
        List<String> rest = new ArrayList<>();
        for (String kv : Arrays.copyOfRange(a, 6, a.length)) {
            if (kv.startsWith("tool.deadline.ms=")) deadlineMs = Long.parseLong(kv.substring(17));
            else if (kv.startsWith("tool.records.per.s=")) rate = Double.parseDouble(kv.substring(19));
            else rest.add(kv);
        }
        String[] extra = rest.toArray(new String[0]);
        Properties cp = clientProps(bootstrap, extra, "consumer");
        cp.put("group.id", group);
        cp.put("isolation.level", "read_committed");
        cp.put("enable.auto.commit", "false");
        cp.putIfAbsent("auto.offset.reset", "earliest");
        Properties pp = clientProps(bootstrap, extra, "producer");
        pp.put("transactional.id", txid);
        pp.putIfAbsent("linger.ms", "5");
        try (Consumer<byte[], byte[]> c = new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer());
             Producer<byte[], byte[]> p = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            p.initTransactions();
            c.subscribe(List.of(in));
            long start = System.currentTimeMillis(), done = 0, deadline = start + deadlineMs;
            int txn = 0;
            while (done < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> rs = c.poll(Duration.ofMillis(200));
                if (rs.isEmpty()) continue;
                txn++;
                byte[] tag = Integer.toString(txn).getBytes(StandardCharsets.US_ASCII);
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                try {
                    p.beginTransaction();
                    for (ConsumerRecord<byte[], byte[]> r : rs) {
                        p.send(new ProducerRecord<>(outTopic, r.partition(), null, r.key(), r.value(),
                            List.of(new RecordHeader("txn", tag))));
                        next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    p.sendOffsetsToTransaction(next, c.groupMetadata());
                    if (abortEvery > 0 && txn % abortEvery == 0) {
                        p.flush();   // abortTransaction drops unsent records: get them into the log first
                        p.abortTransaction();
                        out("aborted", txn, rs.count(), offsets(next));
                        rewind(c);
                    } else {
                        retryOnTimeout(p::commitTransaction);
                        done += rs.count();
                        out("committed", txn, rs.count(), offsets(next));
                    }
                } catch (org.apache.kafka.common.errors.ProducerFencedException
                         | org.apache.kafka.common.errors.OutOfOrderSequenceException
                         | org.apache.kafka.common.errors.AuthorizationException e) {
                    throw e;   // fatal for this producer
                } catch (KafkaException e) {
                    out("failed", txn, name(e));
                    retryOnTimeout(p::abortTransaction);
                    out("aborted", txn, rs.count(), offsets(next));
                    rewind(c);
                }
                if (rate > 0) {
                    long ahead = (long) (done * 1000 / rate) - (System.currentTimeMillis() - start);
                    if (ahead > 0) Thread.sleep(Math.min(ahead, 1000));
                }
            }
            out("done", done, txn);
        }
    }

    static String name(Throwable t) { return t == null ? "-" : t.getClass().getSimpleName(); }

    static void fence(String bootstrap, String[] a) throws Exception {
        String topic = a[0], txid = a[1];
        Properties pp = clientProps(bootstrap, Arrays.copyOfRange(a, 2, a.length), "producer");
        pp.put("transactional.id", txid);
        Producer<byte[], byte[]> pa = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer());
        try (Producer<byte[], byte[]> pb = new KafkaProducer<>(pp, new ByteArraySerializer(), new ByteArraySerializer())) {
            pa.initTransactions();
            pa.beginTransaction();
            pa.send(new ProducerRecord<>(topic, 0, null, "a-1".getBytes())).get(30, TimeUnit.SECONDS);
            out("a-sent");
            pb.initTransactions();
            out("b-init");
            try {
                pa.commitTransaction();
                out("a-commit", "ok", "-");
            } catch (KafkaException e) {
                out("a-commit", name(e), name(e.getCause()));
            }
            try {
                pa.beginTransaction();
                pa.send(new ProducerRecord<>(topic, 0, null, "a-2".getBytes())).get(30, TimeUnit.SECONDS);
                out("a-again", "ok");
            } catch (Exception e) {
                Throwable t = e instanceof ExecutionException ? e.getCause() : e;
                out("a-again", name(t));
            }
            pb.beginTransaction();
            RecordMetadata m = pb.send(new ProducerRecord<>(topic, 0, null, "b-1".getBytes())).get(30, TimeUnit.SECONDS);
            pb.commitTransaction();
            out("b-committed", m.offset());
        } finally {
            pa.close(Duration.ofSeconds(5));
        }
    }
}

// load TOPIC PARTITIONS NAME RATE_PER_S [prop=value ...] : the fault tests' producer workload
// (compat_tests/cluster_faults/workload.py). Sends NAME-<seq> round-robin over the partitions
// until stdin closes, then flushes and exits. One line per event, each send's "invoke" printed
// before the send so it precedes its outcome:
//   invoke \t value \t partition | ok \t value \t partition \t offset
//   | fail|info \t value \t error \t retriable|fatal  (is the callback's exception a RetriableException)
class LoadTool {
    static synchronized void out(String... f) { System.out.println(String.join("\t", f)); System.out.flush(); }

    // refused before the append: the record certainly is not in the log
    static final Set<String> DEFINITE = Set.of("NotEnoughReplicasException", "RecordTooLargeException",
        "InvalidRecordException", "TopicAuthorizationException");

    static void run(String bootstrap, String[] a) throws Exception {
        String topic = a[0], name = a[2];
        int partitions = Integer.parseInt(a[1]);
        long intervalNs = (long) (1e9 / Double.parseDouble(a[3]));
        Properties p = KafkaTool.props(bootstrap, Arrays.copyOfRange(a, 4, a.length));
        AtomicBooleanHolder stop = new AtomicBooleanHolder();
        Thread watcher = new Thread(() -> {
            try { while (System.in.read() != -1) { } } catch (IOException e) { }
            stop.set();
        });
        watcher.setDaemon(true);
        watcher.start();
        try (Producer<byte[], byte[]> producer =
                 new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (long seq = 0; !stop.get(); seq++) {
                String value = name + "-" + seq;
                int part = (int) (seq % partitions);
                out("invoke", value, Integer.toString(part));
                producer.send(new ProducerRecord<>(topic, part, null, value.getBytes(StandardCharsets.UTF_8)),
                    (m, e) -> {
                        if (e == null) out("ok", value, Integer.toString(m.partition()), Long.toString(m.offset()));
                        else out(DEFINITE.contains(e.getClass().getSimpleName()) ? "fail" : "info", value,
                                 e.getClass().getSimpleName(),
                                 e instanceof org.apache.kafka.common.errors.RetriableException ? "retriable" : "fatal");
                    });
                Thread.sleep(intervalNs / 1_000_000, (int) (intervalNs % 1_000_000));
            }
            producer.flush();
        }
        out("done");
    }

    static class AtomicBooleanHolder {
        private volatile boolean v;
        void set() { v = true; }
        boolean get() { return v; }
    }
}
