// A real HDFS and YARN in one JVM, for the tests: Hadoop's own mini clusters (MiniDFSCluster: a NameNode and a
// DataNode; MiniYARNCluster: a ResourceManager and a NodeManager), on 127.0.0.1. Run by scripts/local_hadoop.py in
// java's source-file mode (no javac step):
//
//     java -cp CLASSPATH MiniHdfsYarn.java WORKDIR [key=value ...]
//
// The settings go into the clusters' Configuration. When both answer, WORKDIR/ready.json holds their addresses;
// the JVM then runs until its stdin ends (the Python that started it stopped it, or died) or a SIGTERM.
import java.io.File;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.container.Container;
import org.apache.hadoop.yarn.server.nodemanager.containermanager.container.ContainerState;

public class MiniHdfsYarn {
  public static void main(String[] args) {
    try {
      run(args);
    } catch (Throwable failure) {
      failure.printStackTrace();
      // HDFS's non-daemon threads would keep a half-started JVM alive, and the Python waiting on it.
      Runtime.getRuntime().halt(1);
    }
  }

  static void run(String[] args) throws Exception {
    long started = System.currentTimeMillis();
    File work = new File(args[0]).getAbsoluteFile();
    // MiniYARNCluster puts its NodeManager's local and log dirs (the containers' working dirs and logs) under
    // GenericTestUtils.getTestDir(), which is this property, else target/test/data under the current directory.
    System.setProperty("test.build.data", new File(work, "yarn").getPath());
    Configuration conf = new Configuration();
    for (int i = 1; i < args.length; i++) {
      String[] setting = args[i].split("=", 2);
      conf.set(setting[0], setting[1]);
    }
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(work, "dfs").getPath());
    MiniDFSCluster dfs = new MiniDFSCluster.Builder(conf).numDataNodes(1).storagesPerDatanode(1).format(true)
        .build();
    dfs.waitActive();
    long dfsUp = System.currentTimeMillis();

    YarnConfiguration yarnConf = new YarnConfiguration(conf);
    // MiniDFSCluster's own fs.defaultFS names localhost; YARN's applications are handed 127.0.0.1, where it
    // listens, as the clients are.
    yarnConf.set("fs.defaultFS", "hdfs://127.0.0.1:" + dfs.getNameNodePort());
    // The ResourceManager's ports are chosen here, just before it binds them: with MiniYARNCluster's own
    // ephemeral ones its web port stays out of its configuration, and every application's tracking URL reads
    // http://localhost:0/proxy/.... (The NodeManager's are ephemeral whatever is set, on localhost.)
    yarnConf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
    String[] rmKeys = {YarnConfiguration.RM_ADDRESS, YarnConfiguration.RM_SCHEDULER_ADDRESS,
        YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, YarnConfiguration.RM_ADMIN_ADDRESS,
        YarnConfiguration.RM_WEBAPP_ADDRESS};
    String[] rmAddresses = new String[rmKeys.length];  // the ResourceManager rewrites its own to localhost:PORT
    ServerSocket[] free = new ServerSocket[rmKeys.length];
    for (int i = 0; i < rmKeys.length; i++) {
      free[i] = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"));  // all open at once: 5 distinct
      rmAddresses[i] = "127.0.0.1:" + free[i].getLocalPort();
      yarnConf.set(rmKeys[i], rmAddresses[i]);
    }
    for (ServerSocket each : free) {
      each.close();
    }
    MiniYARNCluster yarn = new MiniYARNCluster("sparkpoint", 1, 1, 1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(yarn, dfs)));
    yarn.init(yarnConf);
    yarn.start();
    if (!yarn.waitForNodeManagersToConnect(60000)) {
      throw new IllegalStateException("the NodeManager did not register with the ResourceManager");
    }
    long yarnUp = System.currentTimeMillis();

    NodeManager nodeManager = yarn.getNodeManager(0);
    StringBuilder addresses = new StringBuilder();
    for (int i = 0; i < rmKeys.length; i++) {
      addresses.append(String.format("\"%s\": \"%s\", ", rmKeys[i], rmAddresses[i]));
    }
    String ready = String.format(
        "{%s\"nn_rpc_port\": %d, \"nn_http_port\": %d, \"nm_web_port\": %d, \"nm_log_dirs\": \"%s\","
            + " \"dfs_ms\": %d, \"yarn_ms\": %d}",
        addresses, dfs.getNameNodePort(), dfs.getNameNode().getHttpAddress().getPort(),
        nodeManager.getNMContext().getHttpPort(), nodeManager.getConfig().get(YarnConfiguration.NM_LOG_DIRS),
        dfsUp - started, yarnUp - dfsUp);
    // Written whole or not at all: the Python polls for it.
    Path partial = new File(work, "ready.json.part").toPath();
    Files.writeString(partial, ready);
    Files.move(partial, new File(work, "ready.json").toPath(), StandardCopyOption.ATOMIC_MOVE);
    System.err.println("READY " + ready);

    while (System.in.read() != -1) {
      // Nothing is ever sent: the end of stdin is the signal.
    }
    System.err.println("stdin closed: stopping");
    System.exit(0);
  }

  /** Ends every container, then HDFS, then the JVM. */
  static void stop(MiniYARNCluster yarn, MiniDFSCluster dfs) {
    // The NodeManager ends its containers (their whole process groups) first thing when it stops. What YARN's
    // stop does after that waits out timeouts, up to 7 s and 10 s, for applications whose logs are kept for hours
    // and 5 s more for application masters that were running: nothing a throwaway cluster needs. So YARN
    // stops on a thread of its own, and once no container runs the JVM ends without waiting for it.
    Thread yarnStop = new Thread(yarn::stop, "stop-yarn");
    yarnStop.setDaemon(true);
    yarnStop.start();
    NodeManager nodeManager = yarn.getNodeManager(0);
    long deadline = System.currentTimeMillis() + 30000;
    try {
      while (yarnStop.isAlive() && System.currentTimeMillis() < deadline && nodeManager != null
          && !nodeManager.getNMContext().getContainers().values().stream()
              .map(Container::getContainerState).allMatch(ContainerState.DONE::equals)) {
        Thread.sleep(100);
      }
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
    }
    try {
      dfs.shutdown();
    } catch (Throwable failure) {
      failure.printStackTrace();
    }
    System.err.println("stopped");
    Runtime.getRuntime().halt(0);
  }
}
