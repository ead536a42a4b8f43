package io.servefleet.client;

import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import io.servefleet.v1.ControllerServiceGrpc;
import io.servefleet.v1.ControllerServiceGrpc.ControllerServiceBlockingStub;
import io.servefleet.v1.DeleteApplicationsRequest;
import io.servefleet.v1.DeployApplicationsRequest;
import io.servefleet.v1.DeployApplicationsResponse;
import io.servefleet.v1.DeployRequest;
import io.servefleet.v1.DeployResponse;
import io.servefleet.v1.DeploymentSpec;
import io.servefleet.v1.GetStatusRequest;
import io.servefleet.v1.GetStatusResponse;
import io.servefleet.v1.WatchRequest;
import io.servefleet.v1.WatcherKind;
import java.io.File;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * A client of the servefleet controller API that always talks to the leader.
 *
 * <p>As the Python SDK does: a standby answers UNAVAILABLE with the leader's address in the
 * trailing metadata key {@code servefleet-leader}, and the client goes there. UNAVAILABLE,
 * DEADLINE_EXCEEDED and a connection closed under the call are retried on the next controller
 * with backoff until the timeout has passed (Deploy is idempotent, so a retry after an unknown
 * outcome changes nothing).
 *
 * <pre>{@code
 * try (ControllerClient client = ControllerClient.builder("127.0.0.1:7373,127.0.0.1:7374")
 *     .token(System.getenv("SERVEFLEET_TOKEN")).build()) {
 *   client.deploy(DeploymentSpec.newBuilder().setName("m").setImportPath("model:App").build());
 * }
 * }</pre>
 */
public final class ControllerClient implements AutoCloseable {
  /** Where a standby names the leader in its answer's trailers. */
  public static final Metadata.Key<String> LEADER_KEY =
      Metadata.Key.of("servefleet-leader", Metadata.ASCII_STRING_MARSHALLER);
  /** The address used when none is given. */
  public static final String DEFAULT_ADDRESS = "127.0.0.1:7373";
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final List<String> addresses = new ArrayList<>();
  private final Map<String, ManagedChannel> channels = new HashMap<>();
  private final ChannelCredentials credentials;
  private final long timeoutMillis;
  private final long rpcTimeoutMillis;
  private final String token;
  private int current;

  /** Controllers as "host:port" strings, several separated by commas; plain text, no token. */
  public ControllerClient(String addresses) {
    this(builder(addresses));
  }

  private ControllerClient(Builder b) {
    for (String part : b.addresses.split(",")) {
      if (!part.trim().isEmpty()) {
        addresses.add(part.trim());
      }
    }
    if (addresses.isEmpty()) {
      addresses.add(DEFAULT_ADDRESS);
    }
    credentials = b.credentials;
    timeoutMillis = b.timeout.toMillis();
    rpcTimeoutMillis = b.rpcTimeout.toMillis();
    token = b.token;
  }

  /** A client of the controllers at {@code addresses} ("host:port", comma-separated). */
  public static Builder builder(String addresses) {
    return new Builder(addresses == null ? "" : addresses);
  }

  /**
   * A client configured as the servefleet command is: addresses from SERVEFLEET_CONTROLLER
   * (else {@value #DEFAULT_ADDRESS}), mutual TLS from SERVEFLEET_CERTS (DIR/admin.crt) or
   * SERVEFLEET_CLUSTER_CA, _CERT and _KEY, the token from SERVEFLEET_TOKEN.
   *
   * @throws IllegalArgumentException naming a variable set to something that cannot work
   */
  public static ControllerClient fromEnv() {
    Builder b = builder(System.getenv("SERVEFLEET_CONTROLLER"));
    String token = System.getenv("SERVEFLEET_TOKEN");
    if (token != null && !token.isEmpty()) {
      String problem = Credentials.tokenProblem(token);
      if (problem != null) {
        throw new IllegalArgumentException("servefleet: SERVEFLEET_TOKEN: " + problem);
      }
      b.token(token);
    }
    String dir = System.getenv("SERVEFLEET_CERTS");
    String[] files = {System.getenv("SERVEFLEET_CLUSTER_CA"),
        System.getenv("SERVEFLEET_CLUSTER_CERT"), System.getenv("SERVEFLEET_CLUSTER_KEY")};
    int set = 0;
    for (String file : files) {
      set += file == null || file.isEmpty() ? 0 : 1;
    }
    if (dir != null && !dir.isEmpty()) {
      b.credentials(Credentials.tlsFromDir(new File(dir), "admin"));
    } else if (set == 3) {
      b.credentials(Credentials.tls(new File(files[0]), new File(files[1]), new File(files[2])));
    } else if (set > 0) {
      throw new IllegalArgumentException("servefleet: mutual TLS needs all of"
          + " SERVEFLEET_CLUSTER_CA, SERVEFLEET_CLUSTER_CERT and SERVEFLEET_CLUSTER_KEY"
          + " (or SERVEFLEET_CERTS)");
    }
    return b.build();
  }

  /** The options of a client; {@link #build()} makes it. */
  public static final class Builder {
    private final String addresses;
    private ChannelCredentials credentials = Credentials.plainText();
    private Duration timeout = Duration.ofSeconds(30);
    private Duration rpcTimeout = Duration.ofSeconds(5);
    private String token;

    private Builder(String addresses) {
      this.addresses = addresses;
    }

    /** {@link Credentials#plainText()} (the default) or {@link Credentials#tls}. */
    public Builder credentials(ChannelCredentials credentials) {
      this.credentials = credentials;
      return this;
    }

    /** How long one method may take, retries and failover included (default 30 s). */
    public Builder timeout(Duration timeout) {
      this.timeout = timeout;
      return this;
    }

    /** How long one attempt on one controller may take (default 5 s). */
    public Builder rpcTimeout(Duration rpcTimeout) {
      this.rpcTimeout = rpcTimeout;
      return this;
    }

    /**
     * A bearer token ({@code servefleet token create}), sent with every call; null for none.
     *
     * @throws IllegalArgumentException saying why the token cannot be sent
     */
    public Builder token(String token) {
      String problem = token == null ? null : Credentials.tokenProblem(token);
      if (problem != null) {
        throw new IllegalArgumentException("servefleet: " + problem);
      }
      this.token = token;
      return this;
    }

    public ControllerClient build() {
      return new ControllerClient(this);
    }
  }

  private synchronized ControllerServiceBlockingStub stub(String address) {
    ManagedChannel channel = channels.computeIfAbsent(
        address, a -> Grpc.newChannelBuilder(a, credentials).build());
    ControllerServiceBlockingStub stub = ControllerServiceGrpc.newBlockingStub(channel);
    if (token != null) {
      Metadata headers = new Metadata();
      headers.put(AUTHORIZATION, "Bearer " + token);
      stub = stub.withInterceptors(MetadataUtils.newAttachHeadersInterceptor(headers));
    }
    return stub;
  }

  /**
   * Runs one unary RPC on the leader, following hints and retrying as described above: any
   * method of the ControllerService, with this client's credentials, e.g.
   * {@code client.call(s -> s.listReplicas(request))}.
   */
  public <T> T call(Function<ControllerServiceBlockingStub, T> rpc) {
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
        lastError = address + ": " + e.getStatus().getCode() + " " + e.getStatus().getDescription();
        if (System.currentTimeMillis() >= deadline) {
          throw Status.UNAVAILABLE
              .withDescription("no controller leader reachable at " + String.join(", ", addresses)
                  + " within " + timeoutMillis + " ms (last error: " + lastError + ")")
              .withCause(e)
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
   * {@link java.io.IOException}) as its cause, as when the controller it was connected to has
   * just been killed. An UNKNOWN from the server itself has no such cause and is not retried.
   */
  public static boolean retryable(StatusRuntimeException e) {
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

  /** Deletes the applications; returns the names that were deleted. */
  public List<String> deleteApplications(String... names) {
    return call(s -> s.deleteApplications(
        DeleteApplicationsRequest.newBuilder().addAllNames(List.of(names)).build()))
        .getDeletedList();
  }

  public GetStatusResponse status() {
    return call(s -> s.getStatus(GetStatusRequest.getDefaultInstance()));
  }

  /**
   * A Watch stream on the leader for the keys ("routes", "replicas/APP/DEPLOYMENT", ...): the
   * first answer is a snapshot of each, later ones come as they change. Close the stream to end
   * it. When the leader stops, reading throws; call watch again (see {@link WatchStream}).
   */
  public WatchStream watch(String... keys) {
    String leader = status().getLeader();
    if (leader.isEmpty()) {
      synchronized (this) {
        leader = addresses.get(current);
      }
    }
    WatchRequest.Builder request = WatchRequest.newBuilder()
        .setKind(WatcherKind.WATCHER_KIND_HANDLE);
    for (String key : keys) {
      request.putKnown(key, "");
    }
    ControllerServiceBlockingStub stub = stub(leader);
    return new WatchStream(leader, () -> stub.watch(request.build()));
  }

  /** The addresses this client knows, leaders it was pointed to included. */
  public synchronized List<String> addresses() {
    return List.copyOf(addresses);
  }

  @Override
  public synchronized void close() {
    for (ManagedChannel channel : channels.values()) {
      channel.shutdownNow();
    }
    channels.clear();
  }
}
