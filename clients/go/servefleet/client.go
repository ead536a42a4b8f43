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
// Timeout has passed (Deploy is idempotent, so a retry after an unknown
// outcome changes nothing).
package servefleet

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"time"

	pb "github.com/servefleet/servefleet/gen/go/servefleet/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// LeaderKey is the trailing metadata key naming the leader on a standby's refusal.
const LeaderKey = "servefleet-leader"

// Client calls the leader among a set of controllers.
type Client struct {
	// Timeout bounds a whole call, retries included; RPCTimeout one attempt.
	Timeout    time.Duration
	RPCTimeout time.Duration
	// Token, when set, is sent as `authorization: Bearer <token>`.
	Token string

	mu        sync.Mutex
	addresses []string
	current   int
	conns     map[string]*grpc.ClientConn
}

// New returns a client of the controllers at addresses ("host:port"; one
// argument may hold several, comma-separated).
func New(addresses ...string) *Client {
	var list []string
	for _, a := range addresses {
		for _, part := range strings.Split(a, ",") {
			if part = strings.TrimSpace(part); part != "" {
				list = append(list, part)
			}
		}
	}
	if len(list) == 0 {
		list = []string{"127.0.0.1:7373"}
	}
	return &Client{Timeout: 30 * time.Second, RPCTimeout: 5 * time.Second,
		addresses: list, conns: map[string]*grpc.ClientConn{}}
}

// Close closes the connections.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
}

func (c *Client) stub(address string) (pb.ControllerServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, ok := c.conns[address]
	if !ok {
		var err error
		conn, err = grpc.Dial(address, grpc.WithInsecure())
		if err != nil {
			return nil, err
		}
		c.conns[address] = conn
	}
	return pb.NewControllerServiceClient(conn), nil
}

func (c *Client) withToken(ctx context.Context) context.Context {
	if c.Token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.Token)
}

// call runs one RPC on the leader, following hints and retrying as described above.
func (c *Client) call(ctx context.Context,
	rpc func(context.Context, pb.ControllerServiceClient, ...grpc.CallOption) error) error {
	deadline := time.Now().Add(c.Timeout)
	lastError := "no attempt made"
	for attempt := 1; ; attempt++ {
		c.mu.Lock()
		address := c.addresses[c.current]
		c.mu.Unlock()
		stub, err := c.stub(address)
		if err != nil {
			return err
		}
		attemptCtx, cancel := context.WithTimeout(c.withToken(ctx), minDuration(
			c.RPCTimeout, time.Until(deadline)))
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
		lastError = fmt.Sprintf("%s: %s", address, status.Convert(err).Message())
		if time.Now().After(deadline) {
			return status.Errorf(codes.Unavailable, "no controller leader reachable at %s "+
				"within %s (last error: %s)", strings.Join(c.addresses, ", "), c.Timeout, lastError)
		}
		c.follow(address, trailer.Get(LeaderKey))
		backoff := time.Duration(float64(50*time.Millisecond) * float64(int(1)<<min(attempt, 5)) *
			(0.5 + rand.Float64()/2))
		if backoff > time.Second {
			backoff = time.Second
		}
		time.Sleep(minDuration(backoff, time.Until(deadline)))
	}
}

// follow moves to the hinted leader, or else to the next controller.
func (c *Client) follow(address string, hints []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
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

// Deploy creates or updates one deployment.
func (c *Client) Deploy(ctx context.Context, spec *pb.DeploymentSpec) (*pb.DeployResponse, error) {
	var reply *pb.DeployResponse
	err := c.call(ctx, func(ctx context.Context, s pb.ControllerServiceClient, o ...grpc.CallOption) (e error) {
		reply, e = s.Deploy(ctx, &pb.DeployRequest{Spec: spec}, o...)
		return e
	})
	return reply, err
}

// DeployApplications stores a whole set of applications (a config file's request).
func (c *Client) DeployApplications(ctx context.Context, request *pb.DeployApplicationsRequest,
) (*pb.DeployApplicationsResponse, error) {
	var reply *pb.DeployApplicationsResponse
	err := c.call(ctx, func(ctx context.Context, s pb.ControllerServiceClient, o ...grpc.CallOption) (e error) {
		reply, e = s.DeployApplications(ctx, request, o...)
		return e
	})
	return reply, err
}

// DeleteApplications deletes applications by name; returns those deleted.
func (c *Client) DeleteApplications(ctx context.Context, names ...string) ([]string, error) {
	var reply *pb.DeleteApplicationsResponse
	err := c.call(ctx, func(ctx context.Context, s pb.ControllerServiceClient, o ...grpc.CallOption) (e error) {
		reply, e = s.DeleteApplications(ctx, &pb.DeleteApplicationsRequest{Names: names}, o...)
		return e
	})
	if err != nil {
		return nil, err
	}
	return reply.Deleted, nil
}

// Status returns GetStatus from the leader.
func (c *Client) Status(ctx context.Context) (*pb.GetStatusResponse, error) {
	var reply *pb.GetStatusResponse
	err := c.call(ctx, func(ctx context.Context, s pb.ControllerServiceClient, o ...grpc.CallOption) (e error) {
		reply, e = s.GetStatus(ctx, &pb.GetStatusRequest{}, o...)
		return e
	})
	return reply, err
}

// Watch opens a Watch stream on the leader for keys ("routes",
// "replicas/<app>/<deployment>", ...). Cancel ctx to end it.
func (c *Client) Watch(ctx context.Context, keys ...string) (pb.ControllerService_WatchClient, error) {
	found, err := c.Status(ctx) // settles on the leader
	if err != nil {
		return nil, err
	}
	stub, err := c.stub(found.Leader)
	if err != nil {
		return nil, err
	}
	known := map[string]string{}
	for _, k := range keys {
		known[k] = ""
	}
	return stub.Watch(c.withToken(ctx), &pb.WatchRequest{Known: known,
		Kind: pb.WatcherKind_WATCHER_KIND_HANDLE})
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
