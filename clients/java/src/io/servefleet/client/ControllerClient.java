package io.servefleet.client;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import io.servefleet.v1.ControllerServiceGrpc;
import io.servefleet.v1.DeleteApplicationsRequest;
import io.servefleet.v1.DeployApplicationsRequest;
import io.servefleet.v1.DeployApplicationsResponse;
import io.servefleet.v1.DeployRequest;
import io.servefleet.v1.DeployResponse;
import io.servefleet.v1.DeploymentSpec;
import io.servefleet.v1.GetStatusRequest;
import io.servefleet.v1.GetStatusResponse;
import io.servefleet.v1.WatchRequest;
import io.servefleet.v1.WatchResponse;
import io.servefleet.v1.WatcherKind;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * A client of the servefleet controller API that always talks to the leader.
 *
 * <p>Like the Python SDK: a standby answers UNAVAILABLE with the leader's address in the
 * trailing metadata key {@code servefleet-leader}, and the client goes there. UNAVAILABLE,
 * DEADLINE_EXCEEDED and a connection closed under the call are retried on the next controller
 * with backoff until the timeout has passed (Deploy is idempotent, so a retry after an unknown
 * outcome changes nothing).
 *
 * <pre>{@code
 * try (ControllerClient client = new ControllerClient("127.0.0.1:7373,127.0.0.1:7374")) {
 *   client.deploy(DeploymentSpec.newBuilder().setName("m").setImportPath("model:App").build());
 * }
 * }</pre>
 */
public final class ControllerClient implements AutoCloseable {
  public static final Metadata.Key<String> LEADER_KEY =
      Metadata.Key.of("servefleet-leader", Metadata.ASCII_STRING_MARSHALLER);
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final List<String> addresses = new ArrayList<>();
  private final Map<String, ManagedChannel> channels = new HashMap<>();
  private final long timeoutMillis;
  private final long rpcTimeoutMillis;
  private final String token;
  private int current;

  /** Controllers as "host:port" strings, several separated by commas. */
  public ControllerClient(String addresses) {
    this(addresses, 30_000, 5_000, System.getenv("SERVEFLEET_TOKEN"));
  }

  public ControllerClient(String addresses, long timeoutMillis, long rpcTimeoutMillis,
      String token) {
    for (String part : addresses.split(",")) {
      if (!part.trim().isEmpty()) {
        this.addresses.add(part.trim());
      }
    }
    if (this.addresses.isEmpty()) {
      this.addresses.add("127.0.0.1:7373");
    }
    this.timeoutMillis = timeoutMillis;
    this.rpcTimeoutMillis = rpcTimeoutMillis;
    this.token = token;
  }

  private synchronized ControllerServiceGrpc.ControllerServiceBlockingStub stub(String address) {
    ManagedChannel channel = channels.computeIfAbsent(
        address, a -> ManagedChannelBuilder.forTarget(a).usePlaintext().build());
    ControllerServiceGrpc.ControllerServiceBlockingStub stub =
        ControllerServiceGrpc.newBlockingStub(channel);
    if (token != null && !token.isEmpty()) {
      Metadata headers = new Metadata();
      headers.put(AUTHORIZATION, "Bearer " + token);
      stub = stub.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));
    }
    return stub;
  }

  /** Runs one RPC on the leader, following hints and retrying as described above. */
  public <T> T call(Function<ControllerServiceGrpc.ControllerServiceBlockingStub, T> rpc) {
    long deadline = System.currentTimeMillis() + timeoutMillis;
    String lastError = "no attempt made";
    for (int attempt = 1; ; attempt++) {
      String address;
      synchronized (this) {
        address = addresses.get(current);
      }
      long budget = Math.max(50, Math.min(rpcTimeoutMillis, deadline - System.currentTimeMillis()));
      try {
        return rpc.apply(stub(address).withDeadlineAfter(budget, TimeUnit.MILLISECONDS));
      } catch (StatusRuntimeException e) {
        if (!retryable(e)) {
          throw e;
        }
        lastError = address + ": " + e.getStatus().getDescription();
        if (System.currentTimeMillis() >= deadline) {
          throw Status.UNAVAILABLE
              .withDescription("no controller leader reachable at " + String.join(", ", addresses)
                  + " within " + timeoutMillis + " ms (last error: " + lastError + ")")
              .asRuntimeException();
        }
        Metadata trailers = e.getTrailers();
        follow(address, trailers == null ? null : trailers.get(LEADER_KEY));
      }
      long backoff = (long) (Math.min(1000, 50L << Math.min(attempt, 5))
          * (0.5 + ThreadLocalRandom.current().nextDouble() / 2));
      try {
        Thread.sleep(Math.max(0, Math.min(backoff, deadline - System.currentTimeMillis())));
      } catch (InterruptedException interrupted) {
        Thread.currentThread().interrupt();
        throw Status.CANCELLED.withDescription("interrupted").asRuntimeException();
      }
    }
  }

  /**
   * Whether a failed call may go to the next controller: UNAVAILABLE, DEADLINE_EXCEEDED, or a
   * connection that closed under the call. grpc-java's Netty transport reports the last as
   * UNKNOWN "channel closed" with a {@link java.nio.channels.ClosedChannelException} (or another
   * {@link java.io.IOException}) as its cause (grpc/grpc-java issue 10120), as when the
   * controller it was connected to has just been killed. An UNKNOWN from the server itself has
   * no such cause and is not retried.
   */
  static boolean retryable(StatusRuntimeException e) {
    Status.Code code = e.getStatus().getCode();
    if (code == Status.Code.UNAVAILABLE || code == Status.Code.DEADLINE_EXCEEDED) {
      return true;
    }
    if (code != Status.Code.UNKNOWN) {
      return false;
    }
    for (Throwable cause = e.getStatus().getCause(); cause != null; cause = cause.getCause()) {
      if (cause instanceof java.io.IOException) {
        return true;
      }
    }
    return false;
  }

  private synchronized void follow(String address, String hint) {
    if (hint != null && !hint.isEmpty() && !hint.equals(address)) {
      if (!addresses.contains(hint)) {
        addresses.add(hint);
      }
      current = addresses.indexOf(hint);
    } else {
      current = (current + 1) % addresses.size();
    }
  }

  public DeployResponse deploy(DeploymentSpec spec) {
    return call(s -> s.deploy(DeployRequest.newBuilder().setSpec(spec).build()));
  }

  public DeployApplicationsResponse deployApplications(DeployApplicationsRequest request) {
    return call(s -> s.deployApplications(request));
  }

  public List<String> deleteApplications(String... names) {
    return call(s -> s.deleteApplications(
        DeleteApplicationsRequest.newBuilder().addAllNames(List.of(names)).build()))
        .getDeletedList();
  }

  public GetStatusResponse status() {
    return call(s -> s.getStatus(GetStatusRequest.getDefaultInstance()));
  }

  /** A Watch stream on the leader for the keys; read it, then close the client to end it. */
  public Iterator<WatchResponse> watch(String... keys) {
    String leader = status().getLeader();
    WatchRequest.Builder request = WatchRequest.newBuilder()
        .setKind(WatcherKind.WATCHER_KIND_HANDLE);
    for (String key : keys) {
      request.putKnown(key, "");
    }
    return stub(leader).watch(request.build());
  }

  @Override
  public synchronized void close() {
    for (ManagedChannel channel : channels.values()) {
      channel.shutdownNow();
    }
    channels.clear();
  }
}
