// RocksDB state moved to a new partition count without Spark's repartitioner (see rocksdb_split.py).
// Compiled at run time by Janino, which ships in every Spark's jars: plain Java without generics or lambdas.

import org.apache.spark.sql.catalyst.expressions.BoundReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning;
import org.apache.spark.sql.execution.streaming.state.ByteArrayPair;
import org.apache.spark.sql.execution.streaming.state.RocksDB;
import org.apache.spark.sql.execution.streaming.state.RocksDBConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.util.NextIterator;

public class RocksDBSplit {
    // Spark's RocksDB keeps its database and its row count private: a new partition's rows come in whole files,
    // past the puts that count them. Looked up here, so that a Spark without them fails before anything is split.
    private final java.lang.reflect.Field database;
    private final java.lang.reflect.Field keys;
    private final java.lang.reflect.Field internalKeys;
    private final java.lang.reflect.Field loadedKeys;

    public RocksDBSplit() throws Exception {
        database = field("db");
        keys = field("numKeysOnWritingVersion");
        internalKeys = field("numInternalKeysOnWritingVersion");
        loadedKeys = field("numKeysOnLoadedVersion");
    }

    // Spark's own placement of a key among `partitions`: HashPartitioning's partition id over the key's fields,
    // the expression the shuffle before a stateful operator evaluates.
    private static UnsafeProjection placement(StructType keySchema, int partitions) {
        java.util.List fields = new java.util.ArrayList();
        for (int i = 0; i < keySchema.length(); i++) {
            fields.add(new BoundReference(i, keySchema.fields()[i].dataType(), true));
        }
        scala.collection.immutable.Seq exprs = scala.jdk.javaapi.CollectionConverters.asScala(fields).toSeq();
        Expression id = new HashPartitioning(exprs, partitions).partitionIdExpression();
        return UnsafeProjection.create(id);
    }

    private static RocksDB open(String dir, int partition, RocksDBConf conf,
                                org.apache.hadoop.conf.Configuration hadoop, java.io.File local) {
        return new RocksDB(dir, conf, local, hadoop, "sparkpoint-rescale-" + partition, false, false, partition,
                           scala.Option.empty(), scala.Option.empty());
    }

    // One old partition's rows at `version`, read once in key order, each appended to the sorted SST file of the
    // new partition Spark places it in: scratch/<partition>-<new partition>.sst. Returns the rows per new partition,
    // then the keys that placement would not have put in this partition among the `oldPartitions` Spark's shuffle
    // wrote them in: the read-back checks the new partitions with the same placement, so only the old layout can
    // show that it is not the job's.
    public long[] scatter(String dir, int partition, int oldPartitions, long version, RocksDBConf conf,
                          org.apache.hadoop.conf.Configuration hadoop, StructType keySchema, int partitions,
                          String scratch) throws Exception {
        UnsafeProjection place = placement(keySchema, partitions);
        UnsafeProjection placedBefore = placement(keySchema, oldPartitions);
        org.rocksdb.SstFileWriter[] writers = new org.rocksdb.SstFileWriter[partitions];
        long[] rows = new long[partitions + 1];
        org.rocksdb.EnvOptions env = new org.rocksdb.EnvOptions();
        org.rocksdb.Options options = new org.rocksdb.Options();
        options.setCompressionType(org.rocksdb.CompressionType.getCompressionType(conf.compression()));
        RocksDB source = open(dir, partition, conf, hadoop, new java.io.File(scratch, "read-" + partition));
        try {
            source.load(version, scala.Option.empty(), true, false);
            UnsafeRow key = new UnsafeRow(keySchema.length());
            NextIterator pairs = source.iterator();
            try {
                while (pairs.hasNext()) {
                    ByteArrayPair pair = (ByteArrayPair) pairs.next();
                    byte[] bytes = pair.key();
                    if (bytes.length < 1 || bytes[0] != 0) {
                        throw new IllegalStateException("a key of partition " + partition + " is not in the "
                            + "encoding sparkpoint splits (encoding version 0 and an UnsafeRow)");
                    }
                    key.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + 1, bytes.length - 1);
                    if (placedBefore.apply(key).getInt(0) != partition) {
                        rows[partitions]++;
                    }
                    int target = place.apply(key).getInt(0);
                    if (writers[target] == null) {
                        writers[target] = new org.rocksdb.SstFileWriter(env, options);
                        writers[target].open(new java.io.File(scratch, partition + "-" + target + ".sst").getPath());
                    }
                    writers[target].put(bytes, pair.value());
                    rows[target]++;
                }
            } finally {
                pairs.closeIfNeeded();
            }
            for (int i = 0; i < partitions; i++) {
                if (writers[i] != null) {
                    writers[i].finish();
                }
            }
        } finally {
            for (int i = 0; i < partitions; i++) {
                if (writers[i] != null) {
                    writers[i].close();
                }
            }
            options.close();
            env.close();
            source.close();
        }
        return rows;
    }

    // A new partition's state at `version` + 1: an empty store at `version`, the scattered files ingested (moved,
    // not copied), its row count set to theirs, and a snapshot committed through Spark's own upload.
    public void gather(String dir, int partition, long version, RocksDBConf conf,
                       org.apache.hadoop.conf.Configuration hadoop, String[] files, long rows, String scratch)
            throws Exception {
        RocksDB store = open(dir, partition, conf, hadoop, new java.io.File(scratch, "write-" + partition));
        org.rocksdb.IngestExternalFileOptions ingest = new org.rocksdb.IngestExternalFileOptions();
        try {
            store.load(version, scala.Option.empty(), false, true);
            if (files.length > 0) {
                ingest.setMoveFiles(true);
                ((org.rocksdb.RocksDB) database.get(store)).ingestExternalFile(java.util.Arrays.asList(files), ingest);
                keys.setLong(store, rows);
                internalKeys.setLong(store, rows);
            }
            store.commit(true);
        } finally {
            ingest.close();
            store.close();
        }
    }

    // A new partition read back as the restart loads it: a fresh store at `version`, loaded from the checkpoint's
    // files into a directory of its own, read whole. Returns its rows, those Spark places in another partition,
    // and the count its commit recorded (-1 when RocksDB does not track it).
    public long[] readBack(String dir, int partition, long version, RocksDBConf conf,
                           org.apache.hadoop.conf.Configuration hadoop, StructType keySchema, int partitions,
                           String scratch) throws Exception {
        UnsafeProjection place = placement(keySchema, partitions);
        long[] found = new long[3];
        RocksDB store = open(dir, partition, conf, hadoop, new java.io.File(scratch, "read-back-" + partition));
        try {
            store.load(version, scala.Option.empty(), true, false);
            found[2] = loadedKeys.getLong(store);
            UnsafeRow key = new UnsafeRow(keySchema.length());
            NextIterator pairs = store.iterator();
            try {
                while (pairs.hasNext()) {
                    byte[] bytes = ((ByteArrayPair) pairs.next()).key();
                    key.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + 1, bytes.length - 1);
                    if (place.apply(key).getInt(0) != partition) {
                        found[1]++;
                    }
                    found[0]++;
                }
            } finally {
                pairs.closeIfNeeded();
            }
        } finally {
            store.close();
        }
        return found;
    }

    private static java.lang.reflect.Field field(String name) throws Exception {
        java.lang.reflect.Field found = RocksDB.class.getDeclaredField(name);
        found.setAccessible(true);
        return found;
    }
}
