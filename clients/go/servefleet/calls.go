package servefleet

import (
	"context"

	pb "github.com/servefleet/servefleet/gen/go/servefleet/v1"
	"google.golang.org/grpc"
)

// Call runs any ControllerService method on the leader with this client's
// credentials, leader following and retries: rpc is called once per
// attempt and must pass opts on to the stub's method.
//
//	err := client.Call(ctx, func(ctx context.Context, s pb.ControllerServiceClient,
//		opts ...grpc.CallOption) (err error) {
//		reply, err = s.ListReplicas(ctx, &pb.ListReplicasRequest{}, opts...)
//		return err
//	})
func (c *Client) Call(ctx context.Context,
	rpc func(context.Context, pb.ControllerServiceClient, ...grpc.CallOption) error) error {
	return c.call(ctx, rpc)
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
// "replicas/<app>/<deployment>", ...); cancel ctx to end it. The stream
// ends with an error when its controller dies or steps down: call Watch
// again, and it opens on the new leader (its first message is a snapshot).
func (c *Client) Watch(ctx context.Context, keys ...string) (pb.ControllerService_WatchClient, error) {
	if _, err := c.Status(ctx); err != nil { // settles on the leader
		return nil, err
	}
	c.mu.Lock()
	leader := c.addresses[c.current]
	c.mu.Unlock()
	stub, err := c.stub(leader)
	if err != nil {
		return nil, err
	}
	streamCtx, err := c.withToken(ctx)
	if err != nil {
		return nil, err
	}
	known := map[string]string{}
	for _, k := range keys {
		known[k] = ""
	}
	return stub.Watch(streamCtx, &pb.WatchRequest{Known: known,
		Kind: pb.WatcherKind_WATCHER_KIND_HANDLE})
}
