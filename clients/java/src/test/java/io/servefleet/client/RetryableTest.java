package io.servefleet.client;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import org.junit.jupiter.api.Test;

/** Which failed calls the client takes to the next controller (pure logic, no cluster). */
class RetryableTest {
  @Test
  void transportFailuresAreRetried() {
    assertTrue(ControllerClient.retryable(Status.UNAVAILABLE.asRuntimeException()));
    assertTrue(ControllerClient.retryable(Status.DEADLINE_EXCEEDED.asRuntimeException()));
    // What grpc-java's Netty transport gives when the connection closes under a new call
    // (seen in CI when the leader had just been killed).
    assertTrue(ControllerClient.retryable(Status.UNKNOWN.withDescription("channel closed")
        .withCause(new ClosedChannelException()).asRuntimeException()));
    assertTrue(ControllerClient.retryable(Status.UNKNOWN
        .withCause(new RuntimeException(new IOException("Connection reset by peer")))
        .asRuntimeException()));
  }

  @Test
  void answersFromTheServerAreNot() {
    assertFalse(ControllerClient.retryable(Status.UNKNOWN.withDescription("boom")
        .asRuntimeException()));
    assertFalse(ControllerClient.retryable(Status.UNKNOWN
        .withCause(new IllegalStateException("not a transport failure")).asRuntimeException()));
    assertFalse(ControllerClient.retryable(Status.INVALID_ARGUMENT.withDescription("spec.name")
        .asRuntimeException()));
    assertFalse(ControllerClient.retryable(Status.PERMISSION_DENIED.asRuntimeException()));
  }
}
