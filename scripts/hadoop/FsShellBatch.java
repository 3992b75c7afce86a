// `hadoop fs` commands run one after the other in one JVM: Hadoop's own shell (FsShell), so that a benchmark
// copies a given set of files (which one `hadoop fs -get` could only do flattened into one directory) without a
// JVM start per directory. Run by scripts/bench_hdfs_yarn.py in java's source-file mode:
//
//     java -cp HADOOP_CONF_DIR:SPARK_HOME/jars/* FsShellBatch.java < COMMANDS
//
// Each line of COMMANDS is one command's arguments, separated by tabs (-get SRC... DST); the first that fails
// ends the run with its exit status.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FsShell;
import org.apache.hadoop.util.ToolRunner;

public class FsShellBatch {
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    BufferedReader lines = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = lines.readLine(); line != null; line = lines.readLine()) {
      int status = ToolRunner.run(new FsShell(conf), line.split("\t"));
      if (status != 0) {
        System.exit(status);
      }
    }
    System.exit(0);
  }
}
