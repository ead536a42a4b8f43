package io.servefleet.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.servefleet.v1.ApplicationStatus;
import io.servefleet.v1.ApplicationStatusInfo;
import io.servefleet.v1.DeleteDeploymentsRequest;
import io.servefleet.v1.DeploymentSpec;
import io.servefleet.v1.GetStatusResponse;
import io.servefleet.v1.Route;
import java.io.File;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Java client against the real clusters that tests/test_clients.py starts and names in the
 * environment (without it these tests are skipped): two controllers on etcd with a proxy and the
 * process runtime; two controllers with mutual TLS and tokens. The leader is SIGKILLed under
 * open Watch streams in each.
 */
@Timeout(180)
class ClusterIT {
  private static String env(String name) {
    String value = System.getenv(name);
    Assumptions.assumeTrue(value != null && !value.isEmpty(),
        name + " is not set: tests/test_clients.py starts the cluster and sets it");
    return value;
  }

  private static void waitFor(String what, BooleanSupplier check) throws InterruptedException {
    long deadline = System.currentTimeMillis() + 60_000;
    while (!check.getAsBoolean()) {
      if (System.currentTimeMillis() > deadline) {
        fail("timed out waiting for " + what);
      }
      Thread.sleep(200);
    }
  }

  private static boolean running(GetStatusResponse status, String name) {
    for (ApplicationStatusInfo app : status.getApplicationsList()) {
      if (app.getName().equals(name)
          && app.getStatus() == ApplicationStatus.APPLICATION_STATUS_RUNNING) {
        return true;
      }
    }
    return false;
  }

  /** Reads the stream until a snapshot of routes has one with the prefix. */
  private static void routeSeen(WatchStream stream, String prefix) {
    while (true) {
      for (Route route : stream.next().getSnapshot().getRoutes().getRoutesList()) {
        if (route.getRoutePrefix().equals(prefix)) {
          return;
        }
      }
    }
  }

  /** SIGKILLs the leader (its pid from the variable `pids`) under the open stream. */
  private static String killLeader(ControllerClient client, WatchStream stream, String pids) {
    String leader = client.status().getLeader();
    assertEquals(leader, stream.address(), "the stream is open on the leader");
    Matcher m = Pattern.compile("\"" + Pattern.quote(leader) + "\": (\\d+)").matcher(env(pids));
    assertTrue(m.find(), "a pid for " + leader);
    ProcessHandle.of(Long.parseLong(m.group(1))).orElseThrow().destroyForcibly();
    StatusRuntimeException ended = assertThrows(StatusRuntimeException.class, () -> {
      while (true) {
        stream.next();
      }
    });
    assertTrue(ControllerClient.retryable(ended), "the stream ended with " + ended.getStatus());
    return leader;
  }

  /**
   * The docs' program (Fleet.java, docs/guides/java.md) in a JVM of its own deploys, waits for
   * RUNNING and watches; this test's own client calls the application through the proxy and
   * holds a Watch stream of its own; the leader is SIGKILLed under both streams, and both open
   * again on the new leader; Ctrl-C makes the program delete the application.
   */
  @Test
  void theDocsProgramThroughAFailover() throws Exception {
    String controllers = env("SERVEFLEET_CONTROLLER");
    Map<String, String> programEnv = new HashMap<>(Map.of("SERVEFLEET_CONTROLLER", controllers));
    for (String unset : List.of("SERVEFLEET_CERTS", "SERVEFLEET_TOKEN", "SERVEFLEET_CLUSTER_CA",
        "SERVEFLEET_CLUSTER_CERT", "SERVEFLEET_CLUSTER_KEY")) {
      programEnv.put(unset, "");
    }
    try (ControllerClient client = new ControllerClient(controllers);
        Program fleet = new Program(programEnv, "Fleet", "--name", "fleet",
            "--import", "graph_app:hello", "--dir", env("SERVEFLEET_TEST_APPS"),
            "--route", "/fleet")) {
      fleet.until("^  fleet: APPLICATION_STATUS_RUNNING$");
      String first = fleet.until("^watching routes on (\\S+)$").group(1);
      fleet.until("^  route /fleet -> fleet/");
      assertEquals("hello", throughTheProxy("/fleet"));

      try (WatchStream stream = client.watch("routes")) {
        routeSeen(stream, "/fleet");
        assertEquals(first, stream.address());
        // The leader dies under both streams; the next call and new streams find the new one.
        String old = killLeader(client, stream, "SERVEFLEET_TEST_PIDS");
        GetStatusResponse after = client.status();
        assertNotEquals(old, after.getLeader());
        assertTrue(running(after, "fleet"));
        fleet.until("^watch stream ended \\((UNAVAILABLE|UNKNOWN)\\); opening it on the leader$");
        assertEquals(after.getLeader(), fleet.until("^watching routes on (\\S+)$").group(1));
        fleet.until("^  route /fleet -> fleet/");
        try (WatchStream again = client.watch("routes")) {
          assertEquals(after.getLeader(), again.address());
          routeSeen(again, "/fleet");
        }
      }

      // Errors come back with their code and the field at fault.
      StatusRuntimeException bad = assertThrows(StatusRuntimeException.class, () ->
          client.deploy(DeploymentSpec.newBuilder().setName("bad name!").setImportPath("m:a")
              .build()));
      assertEquals(Status.Code.INVALID_ARGUMENT, bad.getStatus().getCode());
      assertTrue(bad.getStatus().getDescription().contains("spec.name"));

      fleet.interrupt();
      fleet.until("^deleted fleet$");
      assertEquals(130, fleet.waitFor(), "the JVM's exit status after SIGINT");
      assertTrue(client.status().getApplicationsList().stream()
          .noneMatch(a -> a.getName().equals("fleet")));
    }
  }

  private static String throughTheProxy(String path) throws InterruptedException {
    HttpClient http = HttpClient.newHttpClient();
    HttpRequest request = HttpRequest.newBuilder(
        URI.create(env("SERVEFLEET_TEST_PROXY") + path)).build();
    String[] answer = {""};
    waitFor("an answer through the proxy", () -> {
      try {
        HttpResponse<String> reply = http.send(request, HttpResponse.BodyHandlers.ofString());
        answer[0] = reply.body();
        return reply.statusCode() == 200;
      } catch (Exception e) {
        return false;
      }
    });
    return answer[0];
  }

  @Test
  void tlsAndToken() {
    String addresses = env("SERVEFLEET_TEST_TLS_CONTROLLER");
    File certs = new File(env("SERVEFLEET_TEST_CERTS"));
    String deployerToken = env("SERVEFLEET_TEST_DEPLOYER_TOKEN");

    try (ControllerClient plain = ControllerClient.builder(addresses)
        .timeout(Duration.ofSeconds(2)).token(deployerToken).build()) {
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class, plain::status);
      assertEquals(Status.Code.UNAVAILABLE, e.getStatus().getCode(), "plain text to TLS");
    }
    try (ControllerClient noToken = ControllerClient.builder(addresses)
        .credentials(Credentials.tlsFromDir(certs, "client")).build()) {
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class, noToken::status);
      assertEquals(Status.Code.UNAUTHENTICATED, e.getStatus().getCode());
      assertTrue(e.getStatus().getDescription().contains("send a token"), e.getMessage());
    }
    // A deployment on its own: a controller without a runtime builds no application.
    DeploymentSpec spec = DeploymentSpec.newBuilder().setName("secure")
        .setImportPath("graph_app:hello").setRoutePrefix("/secure").build();
    try (ControllerClient reader = ControllerClient.builder(addresses)
        .credentials(Credentials.tlsFromDir(certs, "client"))
        .token(env("SERVEFLEET_TEST_READER_TOKEN")).build()) {
      reader.status();
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> reader.deploy(spec));
      assertEquals(Status.Code.PERMISSION_DENIED, e.getStatus().getCode());
    }

    try (ControllerClient deployer = ControllerClient.builder(addresses)
        .credentials(Credentials.tlsFromDir(certs, "client")).token(deployerToken).build()) {
      deployer.deploy(spec);
      try (WatchStream stream = deployer.watch("routes")) {
        routeSeen(stream, "/secure");
        String old = killLeader(deployer, stream, "SERVEFLEET_TEST_TLS_PIDS");
        assertNotEquals(old, deployer.status().getLeader());
      }
      // Any method through call, with the same credentials and leader following.
      List<String> deleted = deployer.call(s -> s.deleteDeployments(
          DeleteDeploymentsRequest.newBuilder().addNames("secure").build())).getDeletedList();
      assertEquals(List.of("secure"), deleted);
    }
  }
}
