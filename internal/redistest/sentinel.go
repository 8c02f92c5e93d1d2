package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelSetup is one master, one replica and one sentinel on loopback.
type SentinelSetup struct {
	Master, Replica *Server
	SentinelAddr    string
	MasterName      string
}

// Sentinel starts a master, a replica and a sentinel watching them.
func Sentinel(tb testing.TB) *SentinelSetup {
	tb.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			Missing(tb, "redis-sentinel")
		}
	}
	master := StartServer(tb)
	replica := StartServer(tb, "--replicaof", "127.0.0.1", portOf(master.Addr))
	dir := tb.TempDir()
	port := FreePort(tb)
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor m 127.0.0.1 %s 1\nsentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 5000\nsentinel parallel-syncs m 1\n",
		port, portOf(master.Addr))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatalf("write sentinel.conf: %v", err)
	}
	args := []string{conf}
	if filepath.Base(bin) == "redis-server" {
		args = append(args, "--sentinel")
	}
	p, err := group(tb, dir).Start("sentinel", exec.Command(bin, args...))
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), p: p}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer func() { _ = sc.Close() }()
	ctx := context.Background()
	for i := 0; ; i++ {
		addr, err := sc.GetMasterAddrByName(ctx, "m").Result()
		if err == nil && len(addr) == 2 {
			info, _ := sc.Replicas(ctx, "m").Result()
			if len(info) > 0 {
				break
			}
		}
		if i == 200 {
			tb.Fatalf("sentinel not ready after 10s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer func() { _ = rc.Close() }()
	for i := 0; ; i++ {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if i == 200 {
			tb.Fatalf("replica link not up after 10s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &SentinelSetup{Master: master, Replica: replica, SentinelAddr: s.Addr, MasterName: "m"}
}

func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return addr
}
