package servefleet

// The Go client against a real cluster that tests/test_clients.py starts:
// two controllers on etcd (SERVEFLEET_CONTROLLER), a proxy
// (SERVEFLEET_TEST_PROXY), the controllers' pids by address
// (SERVEFLEET_TEST_PIDS) and the test apps' folder (SERVEFLEET_TEST_APPS).
// The scenario every client runs: deploy an application, wait until RUNNING,
// call it through the proxy, survive the leader's SIGKILL, delete it.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/servefleet/servefleet/gen/go/servefleet/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func env(t *testing.T, name string) string {
	value := os.Getenv(name)
	if value == "" {
		t.Fatalf("%s is not set: run through tests/test_clients.py", name)
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

func running(s *pb.GetStatusResponse, name string) bool {
	for _, a := range s.Applications {
		if a.Name == name && a.Status == pb.ApplicationStatus_APPLICATION_STATUS_RUNNING {
			return true
		}
	}
	return false
}

func TestDeployCallFailOverDelete(t *testing.T) {
	ctx := context.Background()
	client := New(env(t, "SERVEFLEET_CONTROLLER"))
	defer client.Close()
	proxy := env(t, "SERVEFLEET_TEST_PROXY")
	var pids map[string]int
	if err := json.Unmarshal([]byte(env(t, "SERVEFLEET_TEST_PIDS")), &pids); err != nil {
		t.Fatal(err)
	}

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

	// The route arrives over Watch, and then the call goes through the proxy.
	watchCtx, stop := context.WithCancel(ctx)
	stream, err := client.Watch(watchCtx, "routes")
	if err != nil {
		t.Fatal(err)
	}
	for seen := false; !seen; {
		response, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range response.GetSnapshot().GetRoutes().GetRoutes() {
			seen = seen || r.RoutePrefix == "/gopher"
		}
	}
	stop()
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

	// The leader dies; the next call finds the new one.
	before, err := client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pids[before.Leader], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	after, err := client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Leader == before.Leader || !running(after, "gopher") {
		t.Fatalf("after the crash: leader %s (was %s)", after.Leader, before.Leader)
	}

	// Errors come back with their code and the field at fault.
	_, err = client.Deploy(ctx, &pb.DeploymentSpec{Name: "bad name!", ImportPath: "m:a"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spec.name") {
		t.Fatalf("bad name: %v", err)
	}

	deleted, err := client.DeleteApplications(ctx, "gopher")
	if err != nil || len(deleted) != 1 || deleted[0] != "gopher" {
		t.Fatalf("delete: %v %v", deleted, err)
	}
}
