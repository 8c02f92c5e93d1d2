package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisConfig selects and reaches the Redis that holds the state.
type redisConfig struct {
	url          string
	mode         string // "", single, sentinel, cluster
	addrs        string // comma-separated, sentinel or cluster
	masterName   string
	username     string
	passwordFile string
	tls          bool
	tlsCAFile    string
	db           int
}

func (r redisConfig) validate() error {
	switch r.mode {
	case "":
		if r.addrs != "" || r.masterName != "" {
			return errors.New("--redis-addrs and --redis-master-name need --redis-mode sentinel or cluster")
		}
	case "single":
		if r.url == "" && r.addrs == "" {
			return errors.New("--redis-mode single needs --redis-url or --redis-addrs")
		}
	case "sentinel":
		if r.addrs == "" || r.masterName == "" {
			return errors.New("--redis-mode sentinel needs --redis-addrs (the sentinels) and --redis-master-name")
		}
	case "cluster":
		if r.addrs == "" {
			return errors.New("--redis-mode cluster needs --redis-addrs (some cluster nodes)")
		}
		if r.db != 0 {
			return errors.New("--redis-db must be 0 in cluster mode")
		}
	default:
		return fmt.Errorf("--redis-mode must be single, sentinel or cluster, got %q", r.mode)
	}
	if (r.mode == "sentinel" || r.mode == "cluster") && r.url != "" {
		return errors.New("--redis-url is for single mode; use --redis-addrs for sentinel and cluster")
	}
	if r.addrs != "" {
		addrs := splitList(r.addrs)
		if len(addrs) == 0 {
			return fmt.Errorf("--redis-addrs %q names no address (expected host:port[,host:port...])", r.addrs)
		}
		for _, a := range addrs {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				return fmt.Errorf("--redis-addrs: %q is not host:port", a)
			}
		}
		if r.mode == "single" && r.url == "" && len(addrs) > 1 {
			return fmt.Errorf("--redis-mode single takes one address in --redis-addrs, got %d", len(addrs))
		}
	}
	return nil
}

// embedded reports whether no Redis is configured.
func (r redisConfig) embedded() bool { return r.url == "" && r.mode == "" }

// client builds the go-redis client. The password comes from
// --redis-password-file, else COOLDOWND_REDIS_PASSWORD, else the URL.
func (r redisConfig) client(getenv func(string) string) (redis.UniversalClient, string, error) {
	password := getenv("COOLDOWND_REDIS_PASSWORD")
	if r.passwordFile != "" {
		b, err := os.ReadFile(r.passwordFile)
		if err != nil {
			return nil, "", fmt.Errorf("read --redis-password-file: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	var tlsConf *tls.Config
	if r.tls || r.tlsCAFile != "" {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
		if r.tlsCAFile != "" {
			pem, err := os.ReadFile(r.tlsCAFile)
			if err != nil {
				return nil, "", fmt.Errorf("read --redis-tls-ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, "", errors.New("--redis-tls-ca-file holds no PEM certificate")
			}
			tlsConf.RootCAs = pool
		}
	}
	addrs := splitList(r.addrs)
	switch {
	case r.url != "":
		opts, err := redis.ParseURL(r.url)
		if err != nil {
			return nil, "", errors.New("invalid --redis-url: cannot parse it (expected redis://[user:password@]host:port/db or rediss://...)")
		}
		if r.username != "" {
			opts.Username = r.username
		}
		if password != "" {
			opts.Password = password
		}
		if tlsConf != nil {
			opts.TLSConfig = tlsConf
		}
		opts.ContextTimeoutEnabled = true
		opts.MaintNotificationsConfig = noMaintNotifications()
		return redis.NewClient(opts), "single " + opts.Addr, nil
	case r.mode == "sentinel":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: r.masterName, SentinelAddrs: addrs, Username: r.username, Password: password,
			SentinelUsername: r.username, SentinelPassword: password, DB: r.db, TLSConfig: tlsConf,
			ContextTimeoutEnabled: true, // go-redis has no maintenance notifications for a FailoverClient
		}), "sentinel " + r.masterName + " via " + r.addrs, nil
	case r.mode == "cluster":
		return newHookedCluster(&redis.ClusterOptions{
			Addrs: addrs, Username: r.username, Password: password, TLSConfig: tlsConf,
			ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications(),
		}), "cluster via " + r.addrs, nil
	case len(addrs) == 0:
		return nil, "", errors.New("no Redis address: set --redis-url or --redis-addrs")
	default:
		return redis.NewClient(&redis.Options{Addr: addrs[0], Username: r.username, Password: password, DB: r.db, TLSConfig: tlsConf,
			ContextTimeoutEnabled: true, MaintNotificationsConfig: noMaintNotifications()}), "single " + addrs[0], nil
	}
}

// noMaintNotifications turns off go-redis's maintenance notifications
// (hitless upgrades of Redis Enterprise and Cloud, announced over RESP3).
// In go-redis's default auto mode every new connection asks for them; a
// Redis that refuses (7.x) makes go-redis switch them off by writing the
// client's options, which races with a connection held by Conn() (the
// durable path's WAIT) that shares those options under another lock: the
// race detector caught it in TestClusterDurableReportIsMeasured.
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// openRedis connects to the configured Redis, or starts the embedded one.
func openRedis(ctx context.Context, cfg config, getenv func(string) string, log *slog.Logger) (redis.UniversalClient, func(), error) {
	if cfg.redis.embedded() {
		e, err := startEmbedded()
		if err != nil {
			return nil, nil, err
		}
		log.Warn("no --redis-url: using an embedded in-memory Redis; state is in memory, single-process, and lost on exit")
		return e.client, e.close, nil
	}
	rdb, desc, err := cfg.redis.client(getenv)
	if err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("redis (%s) does not answer: %w", desc, err)
	}
	log.Info("using Redis", "redis", desc, "tls", cfg.redis.tls || strings.HasPrefix(cfg.redis.url, "rediss://"))
	return rdb, func() { _ = rdb.Close() }, nil
}

// hookedCluster is a Cluster client whose hooks also run on the commands
// sent to one node's client directly: a durable report's script and WAIT
// run on a connection of its slot's master (store.Durability, through
// MasterForKey), which the ClusterClient's own hooks never see. So
// --redis-timeout bounds them, and the latency histogram and the health
// log see them, as on single Redis and Sentinel (where a held connection
// inherits its client's hooks). A command the ClusterClient routes to a
// node runs each hook once, on the ClusterClient: its node's copies pass
// it through.
type hookedCluster struct {
	*redis.ClusterClient
	nodes *nodeHooks
}

// newHookedCluster returns a Cluster client on o whose every node client,
// from the first, gets the hooks later added with AddHook.
func newHookedCluster(o *redis.ClusterOptions) *hookedCluster {
	c := &hookedCluster{ClusterClient: redis.NewClusterClient(o), nodes: &nodeHooks{}}
	// Before any command: node clients are created on the first one.
	c.ClusterClient.AddHook(routedHook{})
	c.OnNewNode(c.nodes.joined)
	return c
}

// AddHook adds h to the ClusterClient and to every node client, present
// and future, for the commands the ClusterClient did not route.
func (c *hookedCluster) AddHook(h redis.Hook) {
	c.ClusterClient.AddHook(h)
	c.nodes.add(h)
}

// nodeHooks are the hooks of a Cluster's node clients.
type nodeHooks struct {
	mu    sync.Mutex
	nodes []*redis.Client
	hooks []redis.Hook
}

// joined gives a new node client the hooks added so far.
func (n *nodeHooks) joined(node *redis.Client) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes = append(n.nodes, node)
	for _, h := range n.hooks {
		node.AddHook(directHook{h})
	}
}

// add gives every node client, present and future, h.
func (n *nodeHooks) add(h redis.Hook) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hooks = append(n.hooks, h)
	for _, node := range n.nodes {
		node.AddHook(directHook{h})
	}
}

// routedKey marks the context of a command that the ClusterClient runs,
// hooks and all, before it reaches a node's client.
type routedKey struct{}

// routedHook marks every command and pipeline of the ClusterClient.
type routedHook struct{}

func (routedHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (routedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return next(context.WithValue(ctx, routedKey{}, true), cmd)
	}
}

func (routedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return next(context.WithValue(ctx, routedKey{}, true), cmds)
	}
}

func routed(ctx context.Context) bool { return ctx.Value(routedKey{}) != nil }

// directHook runs its hook on a node client's commands unless the
// ClusterClient routed them (and ran the hook already).
type directHook struct{ h redis.Hook }

func (d directHook) DialHook(next redis.DialHook) redis.DialHook { return d.h.DialHook(next) }

func (d directHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	hooked := d.h.ProcessHook(next)
	return func(ctx context.Context, cmd redis.Cmder) error {
		if routed(ctx) {
			return next(ctx, cmd)
		}
		return hooked(ctx, cmd)
	}
}

func (d directHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	hooked := d.h.ProcessPipelineHook(next)
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if routed(ctx) {
			return next(ctx, cmds)
		}
		return hooked(ctx, cmds)
	}
}
