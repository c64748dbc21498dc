package io.splitflow.bench;

import java.nio.file.Files;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Kafka Streams jobs of the splitflow benchmark.
 *
 * <pre>
 * KStreamsBench MODE GUARANTEE COMMIT_MS BOOTSTRAP INPUT OUTPUT APP_ID THREADS
 *   MODE       passthrough | wordcount | windowcount
 *   GUARANTEE  eos (exactly_once_v2) | alo (at_least_once)
 * </pre>
 *
 * Passthrough copies every record (key and value bytes) from INPUT to OUTPUT.
 * Wordcount splits each value on spaces, skips the first token (the record
 * id), counts the words and writes (word, count) updates to OUTPUT as a
 * string key and an 8-byte big-endian long. Windowcount counts the events
 * ("user page event_time_ms", keyed by user) of each user in tumbling
 * one-minute windows of event time with a grace of 5 s, and writes each
 * window once, when it closes (suppress until the window closes), as key
 * user and value "start end count". The job runs until SIGTERM; the Go
 * driver decides when the output is complete.
 */
public final class KStreamsBench {
  public static void main(String[] args) throws Exception {
    if (args.length != 8) {
      System.err.println("usage: KStreamsBench MODE GUARANTEE COMMIT_MS BOOTSTRAP INPUT OUTPUT APP_ID THREADS");
      System.exit(2);
    }
    String mode = args[0];
    String guarantee = args[1];
    String commitMs = args[2];
    String bootstrap = args[3];
    String input = args[4];
    String output = args[5];
    String appId = args[6];
    String threads = args[7];

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        guarantee.equals("eos") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
    p.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("kstreams-bench-").toString());
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

    StreamsBuilder b = new StreamsBuilder();
    switch (mode) {
      case "passthrough":
        b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
            .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
        break;
      case "wordcount":
        b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
            .flatMapValues(KStreamsBench::words)
            .groupBy((k, w) -> w, Grouped.with(Serdes.String(), Serdes.String()))
            .count()
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        break;
      case "windowcount":
        // suppress(untilWindowCloses), not emitStrategy(onWindowClose()):
        // the latter looks for closed windows only when a record arrives
        // and at most once per emit interval of wall-clock time (an
        // internal setting, 1 s by default), so the windows the last
        // records of an input close could stay unwritten for good.
        // Suppress emits as soon as its stream time passes a window's end
        // plus the grace.
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()).withTimestampExtractor(new EventTime()))
            .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofSeconds(5)))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long()))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
            .toStream()
            .map((w, c) -> KeyValue.pair(w.key(), w.window().start() + " " + w.window().end() + " " + c))
            .to(output, Produced.with(Serdes.String(), Serdes.String()));
        break;
      default:
        System.err.println("unknown mode " + mode);
        System.exit(2);
    }

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      // The state directory is a fresh temporary one per run: remove the
      // stores (millions of keys in the unique-words runs) with it.
      streams.cleanUp();
      stopped.countDown();
    }));
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_APPLICATION;
    });
    streams.start();
    stopped.await();
  }

  private static List<String> words(String line) {
    List<String> out = new ArrayList<>();
    String[] toks = line.split(" ");
    for (int i = 1; i < toks.length; i++) {
      if (!toks[i].isEmpty()) {
        out.add(toks[i]);
      }
    }
    return out;
  }

  /** The event time of "user page event_time_ms"; -1 (dropped) if there is none. */
  static final class EventTime implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      String[] f = String.valueOf(record.value()).split(" ");
      if (f.length != 3) {
        return -1;
      }
      try {
        return Long.parseLong(f[2]);
      } catch (NumberFormatException e) {
        return -1;
      }
    }
  }
}
