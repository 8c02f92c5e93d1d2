package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cooldownd/cooldownd/internal/proctest"
)

// envoyproxy/ratelimit, when -ratelimit names a binary built from its
// source (docs/benchmarks.md says how): run on the bench's redis-server at
// its defaults (but DISABLE_STATS: with no statsd its default sink logs
// every counter to stdout every 10 s; the counters are still kept), one
// domain whose descriptor "worker" has a limit no phase
// reaches, and driven through its own gRPC API by the same load generator
// (connect-go's gRPC protocol over one h2c connection, as the grpc phases
// of cooldownd are). Worker w sends the descriptor worker=w<w>: one counter
// per worker, as each worker has a connection of its own in cooldownd's
// phases. The request and the answer are encoded by hand (protowire), so
// the bench needs none of go-control-plane's types.

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// ratelimitConfig is the domain the bench drives: a limit per worker that
// no phase reaches, so every answer is OK.
const ratelimitConfig = `domain: cooldownd-bench
descriptors:
  - key: worker
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`

// startRatelimit runs bin on redisAddr and waits until its gRPC port
// answers a ShouldRateLimit.
func startRatelimit(ctx context.Context, ps *proctest.Group, bin, redisAddr string) (replica, error) {
	root := filepath.Join(ps.Dir(), "ratelimit-runtime")
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		return replica{}, err
	}
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(ratelimitConfig), 0o644); err != nil {
		return replica{}, err
	}
	var ports [3]int
	for i := range ports {
		p, err := proctest.FreePort()
		if err != nil {
			return replica{}, err
		}
		ports[i] = p
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=single", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
	)
	p, err := ps.Start("ratelimit", cmd)
	if err != nil {
		return replica{}, err
	}
	r := replica{url: "http://127.0.0.1:" + strconv.Itoa(ports[1]), pid: p.Pid()}
	f := ratelimitOp(r.url, 1)
	if err := proctest.WaitFor(ctx, p, 20*time.Second, func() bool { return f(ctx, 0) == nil }); err != nil {
		log, _ := os.ReadFile(ps.LogPath("ratelimit"))
		return replica{}, fmt.Errorf("ratelimit did not answer ShouldRateLimit OK: %w (last: %v)\n%s", err, f(ctx, 0), log)
	}
	return r, nil
}

// rawMsg is a protobuf message already encoded; rawCodec passes it through
// under the name "proto", so connect-go frames it as gRPC's
// application/grpc.
type rawMsg struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawMsg)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return m.b, nil
}

func (rawCodec) Unmarshal(b []byte, v any) error {
	m, ok := v.(*rawMsg)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	m.b = append(m.b[:0], b...)
	return nil
}

// rateLimitRequest encodes envoy.service.ratelimit.v3.RateLimitRequest
// {domain: "cooldownd-bench", descriptors: [{entries: [{key: "worker",
// value: value}]}], hits_addend: 1}.
func rateLimitRequest(value string) []byte {
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "worker")
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, value)
	var desc []byte
	desc = protowire.AppendTag(desc, 1, protowire.BytesType)
	desc = protowire.AppendBytes(desc, entry)
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, "cooldownd-bench")
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	req = protowire.AppendBytes(req, desc)
	req = protowire.AppendTag(req, 3, protowire.VarintType)
	req = protowire.AppendVarint(req, 1)
	return req
}

// overallCode reads RateLimitResponse.overall_code (field 1; OK is 1).
func overallCode(b []byte) (uint64, error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			return v, nil
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return 0, nil // proto3: an absent enum is UNKNOWN (0)
}

// ratelimitOp is one ShouldRateLimit of worker w's descriptor, which must
// answer OK (workers: how many there are).
func ratelimitOp(url string, workers int) op {
	cl := connect.NewClient[rawMsg, rawMsg](h2c(), url+shouldRateLimit, connect.WithGRPC(), connect.WithCodec(rawCodec{}))
	reqs := make([][]byte, workers)
	for w := range reqs {
		reqs[w] = rateLimitRequest(fmt.Sprintf("w%d", w))
	}
	return func(ctx context.Context, w int) error {
		r, err := cl.CallUnary(ctx, connect.NewRequest(&rawMsg{b: reqs[w]}))
		if err != nil {
			return err
		}
		code, err := overallCode(r.Msg.b)
		if err != nil {
			return err
		}
		if code != 1 {
			return errors.New("ratelimit: overall_code " + strconv.FormatUint(code, 10) + ", want OK")
		}
		return nil
	}
}
