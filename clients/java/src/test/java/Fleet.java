// Fleet deploys an application to a servefleet cluster, waits until it runs,
// prints the cluster's status, then follows the routing table on a Watch
// stream, across leader failovers, until Ctrl-C; then deletes it.
//
//   java -cp "$CLASSPATH" Fleet.java --import graph_app:hello --dir /srv/apps --route /hello
import io.grpc.StatusRuntimeException;
import io.servefleet.client.ControllerClient;
import io.servefleet.client.WatchStream;
import io.servefleet.v1.ApplicationSpec;
import io.servefleet.v1.ApplicationStatus;
import io.servefleet.v1.ApplicationStatusInfo;
import io.servefleet.v1.DeployApplicationsRequest;
import io.servefleet.v1.GetStatusResponse;
import io.servefleet.v1.Route;
import io.servefleet.v1.RuntimeOptions;
import java.util.HashMap;
import java.util.Map;

public class Fleet {
  public static void main(String[] args) throws Exception {
    Map<String, String> flags = new HashMap<>(Map.of("--name", "hello", "--route", "/hello",
        "--dir", "", "--import", ""));
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--keep")) {
        flags.put("--keep", "yes"); // leave it deployed on exit
      } else if (flags.containsKey(args[i]) && i + 1 < args.length) {
        flags.put(args[i], args[++i]);
      } else {
        System.err.println(args[i] + ": flags are --name, --import, --dir, --route, --keep");
        System.exit(2);
      }
    }
    String name = flags.get("--name");
    if (flags.get("--import").isEmpty()) {
      System.err.println("--import is required: the application's module:attribute");
      System.exit(2);
    }

    // Controllers, TLS files and token from SERVEFLEET_CONTROLLER,
    // SERVEFLEET_CERTS and SERVEFLEET_TOKEN, as the servefleet command reads them.
    ControllerClient client = ControllerClient.fromEnv();

    // 1. Deploy. Idempotent: the client retries it on the next controller
    // when a leader dies under the call. INVALID_ARGUMENT names the field at fault.
    client.deployApplications(DeployApplicationsRequest.newBuilder()
        .addApplications(ApplicationSpec.newBuilder()
            .setName(name).setImportPath(flags.get("--import"))
            .setRoutePrefix(flags.get("--route"))
            .setRuntime(RuntimeOptions.newBuilder().setWorkingDir(flags.get("--dir"))))
        .build());

    // 4. On Ctrl-C (SIGINT, or SIGTERM), delete it, unless --keep.
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      if (!flags.containsKey("--keep")) {
        client.deleteApplications(name);
        System.out.println("deleted " + name);
      }
      client.close();
    }));

    // 2. Status, until the application runs.
    while (true) {
      GetStatusResponse status = client.status();
      if (running(status, name)) {
        System.out.println("cluster " + status.getCluster() + ", leader " + status.getLeader()
            + ", controllers " + status.getControllersList());
        for (ApplicationStatusInfo app : status.getApplicationsList()) {
          System.out.println("  " + app.getName() + ": " + app.getStatus());
        }
        break;
      }
      Thread.sleep(500);
    }

    // 3. Watch the routes. A stream ends when its controller dies or steps
    // down; watch again opens it on the new leader.
    while (true) {
      try (WatchStream stream = client.watch("routes")) {
        System.out.println("watching routes on " + stream.address());
        while (stream.hasNext()) {
          for (Route r : stream.next().getSnapshot().getRoutes().getRoutesList()) {
            System.out.println("  route " + r.getRoutePrefix() + " -> " + r.getApplication()
                + "/" + r.getDeployment());
          }
        }
      } catch (StatusRuntimeException e) {
        if (!ControllerClient.retryable(e)) {
          throw e;
        }
        System.out.println("watch stream ended (" + e.getStatus().getCode()
            + "); opening it on the leader");
      }
    }
  }

  static boolean running(GetStatusResponse status, String name) {
    for (ApplicationStatusInfo app : status.getApplicationsList()) {
      if (app.getName().equals(name)
          && app.getStatus() == ApplicationStatus.APPLICATION_STATUS_RUNNING) {
        return true;
      }
    }
    return false;
  }
}
