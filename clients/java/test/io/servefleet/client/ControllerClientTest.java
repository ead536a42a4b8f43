package io.servefleet.client;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.servefleet.v1.ApplicationSpec;
import io.servefleet.v1.ApplicationStatus;
import io.servefleet.v1.ApplicationStatusInfo;
import io.servefleet.v1.DeployApplicationsRequest;
import io.servefleet.v1.DeploymentSpec;
import io.servefleet.v1.GetStatusResponse;
import io.servefleet.v1.Route;
import io.servefleet.v1.RuntimeOptions;
import io.servefleet.v1.WatchResponse;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.Iterator;
import java.util.List;
import java.util.function.BooleanSupplier;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.Test;

/**
 * The Java client against a real cluster that tests/test_clients.py starts (two controllers on
 * etcd, a proxy, the controllers' pids by address): deploy an application, wait until RUNNING,
 * call it through the proxy, survive the leader's SIGKILL, delete it.
 */
public class ControllerClientTest {
  private static String env(String name) {
    String value = System.getenv(name);
    if (value == null || value.isEmpty()) {
      fail(name + " is not set: run through tests/test_clients.py");
    }
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

  private static long pidOf(String address) {
    Matcher m = Pattern.compile("\"" + Pattern.quote(address) + "\": (\\d+)")
        .matcher(env("SERVEFLEET_TEST_PIDS"));
    assertTrue("a pid for " + address, m.find());
    return Long.parseLong(m.group(1));
  }

  @Test
  public void deployCallFailOverDelete() throws Exception {
    try (ControllerClient client = new ControllerClient(env("SERVEFLEET_CONTROLLER"))) {
      client.deployApplications(DeployApplicationsRequest.newBuilder()
          .addApplications(ApplicationSpec.newBuilder()
              .setName("java").setRoutePrefix("/java").setImportPath("graph_app:hello")
              .setRuntime(RuntimeOptions.newBuilder().setWorkingDir(env("SERVEFLEET_TEST_APPS"))))
          .build());
      waitFor("java RUNNING", () -> running(client.status(), "java"));

      // The route arrives over Watch; then the call goes through the proxy.
      try (ControllerClient watcher = new ControllerClient(env("SERVEFLEET_CONTROLLER"))) {
        Iterator<WatchResponse> stream = watcher.watch("routes");
        boolean seen = false;
        while (!seen) {
          for (Route route : stream.next().getSnapshot().getRoutes().getRoutesList()) {
            seen = seen || route.getRoutePrefix().equals("/java");
          }
        }
      }
      HttpClient http = HttpClient.newHttpClient();
      HttpRequest request = HttpRequest.newBuilder(URI.create(env("SERVEFLEET_TEST_PROXY") + "/java"))
          .build();
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
      assertEquals("hello", answer[0]);

      // The leader dies; the next call finds the new one.
      String leader = client.status().getLeader();
      ProcessHandle.of(pidOf(leader)).orElseThrow().destroyForcibly();
      GetStatusResponse after = client.status();
      assertNotEquals(leader, after.getLeader());
      assertTrue(running(after, "java"));

      // Errors come back with their code and the field at fault.
      try {
        client.deploy(DeploymentSpec.newBuilder().setName("bad name!").setImportPath("m:a").build());
        fail("a bad name was accepted");
      } catch (StatusRuntimeException e) {
        assertEquals(Status.Code.INVALID_ARGUMENT, e.getStatus().getCode());
        assertTrue(e.getStatus().getDescription().contains("spec.name"));
      }

      assertEquals(List.of("java"), client.deleteApplications("java"));
    }
  }
}
