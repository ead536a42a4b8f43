// Package servefleet is a client of the servefleet controller API for Go,
// over the generated code in gen/go/servefleet/v1.
//
//	client := servefleet.New("127.0.0.1:7373", "127.0.0.1:7374")
//	defer client.Close()
//	reply, err := client.Deploy(ctx, &pb.DeploymentSpec{Name: "m", ImportPath: "model:App"})
//
// Like the Python SDK, every call goes to the leader: a standby answers
// UNAVAILABLE with the leader's address in the trailing metadata key
// servefleet-leader, and the client goes there. UNAVAILABLE and
// DEADLINE_EXCEEDED are retried on the next controller with backoff until
// Timeout has passed (every mutating call is idempotent, so a retry after
// an unknown outcome changes nothing); then the call returns an
// *UnreachableError.
//
// A cluster with certificates takes mutual TLS (set Client.TLS, from
// TLSConfig or TLSConfigFromDir); one with tokens a bearer token
// (Client.Token). NewFromEnv reads both, and the addresses, from the
// variables the servefleet command reads.
package servefleet

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	pb "github.com/servefleet/servefleet/gen/go/servefleet/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// LeaderKey is the trailing metadata key naming the leader on a standby's refusal.
const LeaderKey = "servefleet-leader"

// DefaultAddress is the controller New uses when given no address.
const DefaultAddress = "127.0.0.1:7373"

// Client calls the leader among a set of controllers. Set its fields
// before the first call; it is then safe for concurrent use.
type Client struct {
	// Timeout bounds a whole call, retries included (default 30 s);
	// RPCTimeout one attempt (default 5 s).
	Timeout    time.Duration
	RPCTimeout time.Duration
	// Token, when set, is sent as `authorization: Bearer <token>`.
	Token string
	// TLS, when set, is the client side of mutual TLS (TLSConfig,
	// TLSConfigFromDir); nil: plain text.
	TLS *tls.Config

	mu        sync.Mutex
	addresses []string
	current   int
	conns     map[string]*grpc.ClientConn
}

// New returns a client of the controllers at addresses ("host:port"; one
// argument may hold several, comma-separated); DefaultAddress without any.
func New(addresses ...string) *Client {
	list := splitAddresses(addresses...)
	if len(list) == 0 {
		list = []string{DefaultAddress}
	}
	return &Client{Timeout: 30 * time.Second, RPCTimeout: 5 * time.Second,
		addresses: list, conns: map[string]*grpc.ClientConn{}}
}

func splitAddresses(addresses ...string) []string {
	var list []string
	for _, a := range addresses {
		for _, part := range strings.Split(a, ",") {
			if part = strings.TrimSpace(part); part != "" {
				list = append(list, part)
			}
		}
	}
	return list
}

// Addresses returns the controllers this client knows, the one it calls first.
func (c *Client) Addresses() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append(append([]string{}, c.addresses[c.current:]...), c.addresses[:c.current]...)
}

// Close closes the connections.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for _, conn := range c.conns {
		if err := conn.Close(); err != nil && first == nil {
			first = err
		}
	}
	c.conns = map[string]*grpc.ClientConn{}
	return first
}

func (c *Client) stub(address string) (pb.ControllerServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, ok := c.conns[address]
	if !ok {
		transport := insecure.NewCredentials()
		if c.TLS != nil {
			transport = credentials.NewTLS(c.TLS)
		}
		var err error
		// Quick reconnects: a controller that is restarting or newly elected
		// should be reached within a fraction of a second, not after gRPC's 1 s+.
		conn, err = grpc.NewClient(address, grpc.WithTransportCredentials(transport),
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second,
				Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6,
					Jitter: 0.2, MaxDelay: 2 * time.Second}}))
		if err != nil {
			return nil, fmt.Errorf("servefleet: controller address %q: %w", address, err)
		}
		c.conns[address] = conn
	}
	return pb.NewControllerServiceClient(conn), nil
}

func (c *Client) withToken(ctx context.Context) (context.Context, error) {
	if c.Token == "" {
		return ctx, nil
	}
	if problem := tokenProblem(c.Token); problem != "" {
		return nil, fmt.Errorf("servefleet: cannot send this token: %s", problem)
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.Token), nil
}

// UnreachableError is a call's failure when no controller answered as the
// leader within the client's Timeout. status.Code gives UNAVAILABLE;
// errors.Unwrap the last attempt's error.
type UnreachableError struct {
	Addresses []string
	Timeout   time.Duration
	Last      error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("no controller leader reachable at %s within %s (last error: %v)",
		strings.Join(e.Addresses, ", "), e.Timeout, e.Last)
}

func (e *UnreachableError) Unwrap() error { return e.Last }

// GRPCStatus makes status.Code and status.Convert see UNAVAILABLE.
func (e *UnreachableError) GRPCStatus() *status.Status {
	return status.New(codes.Unavailable, e.Error())
}

// call runs one RPC on the leader, following hints and retrying as described above.
func (c *Client) call(ctx context.Context,
	rpc func(context.Context, pb.ControllerServiceClient, ...grpc.CallOption) error) error {
	ctx, err := c.withToken(ctx)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(c.Timeout)
	for attempt := 1; ; attempt++ {
		c.mu.Lock()
		address := c.addresses[c.current]
		c.mu.Unlock()
		stub, err := c.stub(address)
		if err != nil {
			return err
		}
		attemptCtx, cancel := context.WithTimeout(ctx, min(c.RPCTimeout, time.Until(deadline)))
		var trailer metadata.MD
		err = rpc(attemptCtx, stub, grpc.Trailer(&trailer))
		cancel()
		if err == nil {
			return nil
		}
		code := status.Code(err)
		if code != codes.Unavailable && code != codes.DeadlineExceeded {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return &UnreachableError{Addresses: c.Addresses(), Timeout: c.Timeout,
				Last: fmt.Errorf("%s: %w", address, err)}
		}
		c.follow(address, trailer.Get(LeaderKey))
		backoff := time.Duration(float64(50*time.Millisecond) * float64(int(1)<<min(attempt, 5)) *
			(0.5 + rand.Float64()/2))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(backoff, time.Second, time.Until(deadline))):
		}
	}
}

// follow moves to the hinted leader, or else to the next controller.
func (c *Client) follow(address string, hints []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addresses[c.current] != address {
		return // another goroutine's call has moved on already
	}
	if len(hints) > 0 && hints[0] != "" && hints[0] != address {
		for i, a := range c.addresses {
			if a == hints[0] {
				c.current = i
				return
			}
		}
		c.addresses = append(c.addresses, hints[0])
		c.current = len(c.addresses) - 1
		return
	}
	c.current = (c.current + 1) % len(c.addresses)
}
