// Command watchers holds many Watch streams open for bench/watch_fanout.py.
//
//	watchers -address 127.0.0.1:7373 -streams 1000 -updates 10
//
// It opens -streams Watch calls for the route table, -per-conn to each TCP
// connection, prints "ready" once every stream has its first message, then
// stamps the arrival of every later route table. When each stream has seen
// the table holding route /r<updates>, it prints one JSON line: a list of
// [route count, arrival time in Unix seconds], one per table received.
//
// Go, not Python, because these clients share the machine's two cores with
// the server being measured: in a real cluster every proxy watching is on a
// host of its own, and a Python client costs the server a core's share.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/servefleet/servefleet/gen/go/servefleet/v1"
	"google.golang.org/grpc"
)

const routesKey = "routes"

type arrival struct {
	routes int
	at     time.Time
}

func watch(ctx context.Context, client pb.ControllerServiceClient, last string,
	opened *sync.WaitGroup) ([]arrival, error) {
	stream, err := client.Watch(ctx, &pb.WatchRequest{
		Known: map[string]string{routesKey: ""}, HeartbeatS: 30})
	if err != nil {
		return nil, err
	}
	var got []arrival
	first := true
	for {
		reply, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		at := time.Now()
		if first {
			first = false
			opened.Done()
		}
		snapshot := reply.GetSnapshot()
		if snapshot == nil {
			continue // a heartbeat
		}
		routes := snapshot.GetRoutes().GetRoutes()
		got = append(got, arrival{len(routes), at})
		for _, route := range routes {
			if route.GetRoutePrefix() == last {
				return got[1:], nil // the first table is the one before any update
			}
		}
	}
}

func main() {
	address := flag.String("address", "127.0.0.1:7373", "the Watch server")
	streams := flag.Int("streams", 1000, "streams to open")
	perConn := flag.Int("per-conn", 100, "streams per TCP connection")
	updates := flag.Int("updates", 10, "the stream ends on seeing route /r<updates>")
	flag.Parse()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns := make([]*grpc.ClientConn, (*streams+*perConn-1) / *perConn)
	for i := range conns {
		conn, err := grpc.Dial(*address, grpc.WithInsecure())
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			os.Exit(1)
		}
		defer conn.Close()
		conns[i] = conn
	}
	var opened, done sync.WaitGroup
	var failures atomic.Int32
	results := make([][]arrival, *streams)
	last := fmt.Sprintf("/r%d", *updates)
	for i := 0; i < *streams; i++ {
		opened.Add(1)
		done.Add(1)
		go func(i int) {
			defer done.Done()
			client := pb.NewControllerServiceClient(conns[i%len(conns)])
			got, err := watch(ctx, client, last, &opened)
			if err != nil {
				if failures.Add(1) == 1 {
					fmt.Fprintln(os.Stderr, "watch:", err)
				}
				os.Exit(1)
			}
			results[i] = got
		}(i)
	}
	opened.Wait()
	fmt.Println("ready")
	done.Wait()
	var out [][2]float64
	for _, got := range results {
		for _, a := range got {
			out = append(out, [2]float64{float64(a.routes), float64(a.at.UnixNano()) / 1e9})
		}
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
}
