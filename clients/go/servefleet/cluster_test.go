package servefleet

// The Go client against real clusters that tests/test_clients.py starts
// and names in the environment (without it these tests skip):
//
//   - SERVEFLEET_CONTROLLER: two controllers on etcd, plain text, the
//     process runtime, with a proxy (SERVEFLEET_TEST_PROXY), the
//     controllers' pids by address (SERVEFLEET_TEST_PIDS) and the test
//     apps' folder (SERVEFLEET_TEST_APPS);
//   - SERVEFLEET_TEST_TLS_CONTROLLER: two controllers on etcd with mutual
//     TLS (the `servefleet certs init` directory SERVEFLEET_TEST_CERTS) and
//     tokens (SERVEFLEET_TEST_DEPLOYER_TOKEN, SERVEFLEET_TEST_READER_TOKEN),
//     no runtime, pids in SERVEFLEET_TEST_TLS_PIDS.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/servefleet/servefleet/gen/go/servefleet/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func env(t *testing.T, name string) string {
	value := os.Getenv(name)
	if value == "" {
		t.Skipf("%s is not set: tests/test_clients.py starts a cluster and runs these", name)
	}
	return value
}

func waitFor(t *testing.T, what string, check func() bool) {
	deadline := time.Now().Add(60 * time.Second)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func application(s *pb.GetStatusResponse, name string) *pb.ApplicationStatusInfo {
	for _, a := range s.Applications {
		if a.Name == name {
			return a
		}
	}
	return nil
}

func running(s *pb.GetStatusResponse, name string) bool {
	a := application(s, name)
	return a != nil && a.Status == pb.ApplicationStatus_APPLICATION_STATUS_RUNNING
}

// routeSeen reads the stream until a snapshot routes prefix; false if it ends first.
func routeSeen(t *testing.T, stream pb.ControllerService_WatchClient, prefix string) bool {
	for {
		response, err := stream.Recv()
		if err != nil {
			t.Logf("watch ended: %v", err)
			return false
		}
		for _, r := range response.GetSnapshot().GetRoutes().GetRoutes() {
			if r.RoutePrefix == prefix {
				return true
			}
		}
	}
}

func killLeader(t *testing.T, client *Client, pidsVariable string) string {
	var pids map[string]int
	if err := json.Unmarshal([]byte(env(t, pidsVariable)), &pids); err != nil {
		t.Fatal(err)
	}
	before, err := client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pids[before.Leader], syscall.SIGKILL); err != nil {
		t.Fatalf("kill the leader %s: %v", before.Leader, err)
	}
	return before.Leader
}

// Deploy, wait RUNNING, see the route on Watch, call it through the proxy;
// the leader SIGKILLed under an open Watch stream: the stream ends, the next
// calls and a new Watch find the new leader; errors keep their codes; delete.
func TestDeployWatchCallFailOverDelete(t *testing.T) {
	ctx := context.Background()
	client := New(env(t, "SERVEFLEET_CONTROLLER"))
	defer client.Close()
	proxy := env(t, "SERVEFLEET_TEST_PROXY")

	_, err := client.DeployApplications(ctx, &pb.DeployApplicationsRequest{
		Applications: []*pb.ApplicationSpec{{
			Name: "gopher", RoutePrefix: proto.String("/gopher"), ImportPath: "graph_app:hello",
			Runtime: &pb.RuntimeOptions{WorkingDir: env(t, "SERVEFLEET_TEST_APPS")},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "gopher RUNNING", func() bool {
		s, err := client.Status(ctx)
		return err == nil && running(s, "gopher")
	})

	watchCtx, stop := context.WithTimeout(ctx, 2*time.Minute) // no stream outlives a hang
	defer stop()
	stream, err := client.Watch(watchCtx, "routes")
	if err != nil {
		t.Fatal(err)
	}
	if !routeSeen(t, stream, "/gopher") {
		t.Fatal("the route never came on the Watch stream")
	}
	var answer string
	waitFor(t, "an answer through the proxy", func() bool {
		reply, err := http.Get(proxy + "/gopher")
		if err != nil {
			return false
		}
		defer reply.Body.Close()
		body, _ := io.ReadAll(reply.Body)
		answer = string(body)
		return reply.StatusCode == 200
	})
	if answer != "hello" {
		t.Fatalf("answer %q", answer)
	}

	old := killLeader(t, client, "SERVEFLEET_TEST_PIDS")
	if routeSeen(t, stream, "/never") {
		t.Fatal("unreachable")
	}
	after, err := client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Leader == old || !running(after, "gopher") {
		t.Fatalf("after the crash: leader %s (was %s), gopher running: %v",
			after.Leader, old, running(after, "gopher"))
	}
	again, err := client.Watch(watchCtx, "routes")
	if err != nil {
		t.Fatal(err)
	}
	if !routeSeen(t, again, "/gopher") {
		t.Fatal("no route from the new leader's Watch stream")
	}

	_, err = client.Deploy(ctx, &pb.DeploymentSpec{Name: "bad name!", ImportPath: "m:a"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spec.name") {
		t.Fatalf("bad name: %v", err)
	}
	deleted, err := client.DeleteApplications(ctx, "gopher")
	if err != nil || len(deleted) != 1 || deleted[0] != "gopher" {
		t.Fatalf("delete: %v %v", deleted, err)
	}
}

// Mutual TLS and tokens: no certificate gets no further than the handshake,
// a certificate alone (role client, which may call nothing) is asked for a
// token, a reader's token is refused a deploy, a deployer's token deploys, watches and follows the
// leader to the next controller when it is killed.
func TestTLSAndToken(t *testing.T) {
	ctx := context.Background()
	addresses := env(t, "SERVEFLEET_TEST_TLS_CONTROLLER")
	certs := env(t, "SERVEFLEET_TEST_CERTS")
	connect := func(role, token string, timeout time.Duration) *Client {
		client := New(addresses)
		client.Timeout, client.Token = timeout, token
		if role != "" {
			var err error
			if client.TLS, err = TLSConfigFromDir(certs, role); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { client.Close() })
		return client
	}

	_, err := connect("", env(t, "SERVEFLEET_TEST_DEPLOYER_TOKEN"), 2*time.Second).Status(ctx)
	var unreachable *UnreachableError
	if !errors.As(err, &unreachable) {
		t.Fatalf("plain text to a TLS controller: %v", err)
	}
	_, err = connect("client", "", 10*time.Second).Status(ctx)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "send a token") {
		t.Fatalf("a client certificate without a token: %v", err)
	}
	reader := connect("client", env(t, "SERVEFLEET_TEST_READER_TOKEN"), 10*time.Second)
	if _, err := reader.Status(ctx); err != nil {
		t.Fatalf("reader's status: %v", err)
	}
	// A deployment on its own: a controller without a runtime builds no application.
	spec := &pb.DeploymentSpec{Name: "secure", ImportPath: "graph_app:hello",
		RoutePrefix: proto.String("/secure")}
	if _, err := reader.Deploy(ctx, spec); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("reader's deploy: %v", err)
	}

	deployer := connect("client", env(t, "SERVEFLEET_TEST_DEPLOYER_TOKEN"), 30*time.Second)
	if _, err := deployer.Deploy(ctx, spec); err != nil {
		t.Fatalf("deployer's deploy: %v", err)
	}
	watchCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	stream, err := deployer.Watch(watchCtx, "routes")
	if err != nil || !routeSeen(t, stream, "/secure") {
		t.Fatalf("deployer's watch: %v", err)
	}
	old := killLeader(t, deployer, "SERVEFLEET_TEST_TLS_PIDS")
	after, err := deployer.Status(ctx)
	if err != nil || after.Leader == old {
		t.Fatalf("after the crash, over TLS: %v (leader %v, was %s)", err, after, old)
	}
	// Any method through Call, with the same credentials and leader following.
	var deleted *pb.DeleteDeploymentsResponse
	err = deployer.Call(ctx, func(ctx context.Context, s pb.ControllerServiceClient,
		opts ...grpc.CallOption) (err error) {
		deleted, err = s.DeleteDeployments(ctx, &pb.DeleteDeploymentsRequest{
			Names: []string{"secure"}}, opts...)
		return err
	})
	if err != nil || len(deleted.GetDeleted()) != 1 {
		t.Fatalf("delete: %v %v", deleted, err)
	}
}
