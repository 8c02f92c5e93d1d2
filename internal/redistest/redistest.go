// Package redistest starts Redis servers for tests: a miniredis for fast
// unit tests, and real redis-server processes (single and a 3-master
// Cluster) on free loopback ports for integration tests.
//
// When redis-server is not on PATH the real-Redis helpers skip the test and
// say so loudly; with COOLDOWN_REQUIRE_REAL=1 (as CI sets) they fail it.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/cooldownd/cooldownd/internal/proctest"
)

// Mini starts a miniredis bound to the test and returns it with a client.
func Mini(tb testing.TB) (*miniredis.Miniredis, *redis.Client) {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return m, c
}

// RequireReal reports whether a missing real dependency must fail the test.
func RequireReal() bool { return os.Getenv("COOLDOWN_REQUIRE_REAL") == "1" }

// Missing skips (or, with COOLDOWN_REQUIRE_REAL=1, fails) a test whose real
// dependency is not installed.
func Missing(tb testing.TB, what string) {
	tb.Helper()
	if RequireReal() {
		tb.Fatalf("%s is required (COOLDOWN_REQUIRE_REAL=1) but not installed", what)
	}
	fmt.Fprintf(os.Stderr, "\n*** SKIPPING %s: %s not installed (set COOLDOWN_REQUIRE_REAL=1 to fail instead) ***\n\n", tb.Name(), what)
	tb.Skipf("SKIPPED: %s not installed", what)
}

// FreePort returns a free TCP port on 127.0.0.1 (see [proctest.FreePort],
// the variant for code outside tests).
func FreePort(tb testing.TB) int {
	tb.Helper()
	port, err := proctest.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	return port
}

// Server is one redis-server process.
type Server struct {
	Addr string
	p    *proctest.Proc
}

// Stop kills the server (SIGKILL) and waits for it.
func (s *Server) Stop() { s.p.Kill() }

// group returns a process group logging to dir whose children are killed
// at cleanup (and by the kernel should the test binary die first, on
// Linux).
func group(tb testing.TB, dir string) *proctest.Group {
	g := proctest.NewGroup(dir)
	tb.Cleanup(g.KillAll)
	return g
}

// StartServer starts a redis-server on a free loopback port with extra
// arguments, stopped at cleanup.
func StartServer(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Missing(tb, "redis-server")
	}
	dir := tb.TempDir()
	g := group(tb, dir)
	addr, p, err := g.StartRedis(context.Background(), "redis-server", dir, extra...)
	if err != nil {
		log, _ := os.ReadFile(g.LogPath("redis-server"))
		tb.Fatalf("%v\n%s", err, log)
	}
	return &Server{Addr: addr, p: p}
}

// Real starts a real redis-server and returns a client on it.
func Real(tb testing.TB) *redis.Client {
	tb.Helper()
	s := StartServer(tb)
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Cluster starts a 3-master Redis Cluster on loopback and returns a
// cluster client on it.
func Cluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		Missing(tb, "redis-cli")
	}
	var addrs []string
	for range 3 {
		s := StartServer(tb, "--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	// Every node must agree the cluster is up, or the first commands can
	// still meet CLUSTERDOWN.
	for _, addr := range addrs {
		for i := 0; ; i++ {
			c := redis.NewClient(&redis.Options{Addr: addr})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			if err == nil && clusterOK(info) {
				break
			} else if i == 200 {
				tb.Fatalf("cluster node %s not ok after 10s: %v %s", addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

func clusterOK(info string) bool {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "cluster_state:ok" {
			return true
		}
	}
	return false
}
