package io.servefleet.client;

import io.grpc.Context;
import io.servefleet.v1.WatchResponse;
import java.util.Iterator;
import java.util.function.Supplier;

/**
 * A Watch stream open on one controller (the leader when it opened): read it with
 * {@link #hasNext()} and {@link #next()}, which block until the next answer; close it to end
 * the call. When that controller stops, {@code next()} throws a
 * {@link io.grpc.StatusRuntimeException} (UNAVAILABLE, or UNKNOWN with an
 * {@link java.io.IOException} as its cause: {@link ControllerClient#retryable} says so) and a
 * new {@link ControllerClient#watch} finds the next leader.
 */
public final class WatchStream implements Iterator<WatchResponse>, AutoCloseable {
  private final Context.CancellableContext context;
  private final Iterator<WatchResponse> responses;
  private final String address;

  WatchStream(String address, Supplier<Iterator<WatchResponse>> open) {
    this.address = address;
    this.context = Context.current().withCancellation();
    Context previous = context.attach();
    try {
      this.responses = open.get();
    } finally {
      context.detach(previous);
    }
  }

  /** The controller this stream is open on. */
  public String address() {
    return address;
  }

  @Override
  public boolean hasNext() {
    return responses.hasNext();
  }

  @Override
  public WatchResponse next() {
    return responses.next();
  }

  /** Ends the call (the controller sees it cancelled); reading after it throws CANCELLED. */
  @Override
  public void close() {
    context.cancel(null);
  }
}
