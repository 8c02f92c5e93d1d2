package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/proctest"
	"github.com/cooldownd/cooldownd/internal/server"
)

// The no-op reference is this binary run as `bench -noop-server ADDR`
// [-noop-redis REDIS]: cooldownd's own CooldownService served by a Connect
// handler that does no work, over the http.Server cmd/cooldownd uses
// (server.NewHTTPServer: HTTP/1.1 and h2c on one port, the same timeouts
// and header limit)
// and the handler options internal/server uses (read limit, compression
// threshold). Admit answers a fixed ALLOW (with its one candidate's
// decision) and Report a fixed accepted CLOSED, the shapes of a healthy
// connection's answers. With -noop-redis
// each of the two first runs one EVALSHA of `return 1` through go-redis
// (the default pool, as cooldownd's): the floor of any Redis-backed
// handler. It runs in a process of its own so that its CPU per op is
// measured as cooldownd's is (/proc/<pid>/stat).

// noopService is the handler. rdb is nil without -noop-redis.
type noopService struct {
	cooldownv1connect.UnimplementedCooldownServiceHandler
	rdb *redis.Client
	sha string
}

func (s *noopService) redis(ctx context.Context) error {
	if s.rdb == nil {
		return nil
	}
	if err := s.rdb.EvalSha(ctx, s.sha, nil).Err(); err != nil {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return nil
}

func (s *noopService) Admit(ctx context.Context, _ *connect.Request[cooldownv1.AdmitRequest]) (*connect.Response[cooldownv1.AdmitResponse], error) {
	if err := s.redis(ctx); err != nil {
		return nil, err
	}
	// A healthy one-candidate Admit's answer (internal/server's admitProto):
	// the decision, and the examined candidate's.
	return connect.NewResponse(&cooldownv1.AdmitResponse{Decision: cooldownv1.Decision_DECISION_ALLOW, Revision: 1,
		State: cooldownv1.State_STATE_CLOSED, ServerTime: timestamppb.Now(),
		Candidates: []*cooldownv1.CandidateDecision{{Decision: cooldownv1.Decision_DECISION_ALLOW, State: cooldownv1.State_STATE_CLOSED, Revision: 1}}}), nil
}

func (s *noopService) Report(ctx context.Context, _ *connect.Request[cooldownv1.ReportRequest]) (*connect.Response[cooldownv1.ReportResponse], error) {
	if err := s.redis(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&cooldownv1.ReportResponse{State: cooldownv1.State_STATE_CLOSED, Revision: 1, Accepted: true,
		ServerTime: timestamppb.Now()}), nil
}

// runNoop serves the no-op handler on addr until the process is killed.
func runNoop(addr, redisAddr string) error {
	svc := &noopService{}
	if redisAddr != "" {
		svc.rdb = redis.NewClient(&redis.Options{Addr: redisAddr})
		sha, err := svc.rdb.ScriptLoad(context.Background(), "return 1").Result()
		if err != nil {
			return fmt.Errorf("noop: SCRIPT LOAD: %w", err)
		}
		svc.sha = sha
	}
	mux := http.NewServeMux()
	mux.Handle(cooldownv1connect.NewCooldownServiceHandler(svc,
		connect.WithReadMaxBytes(server.MaxRequestBytes), connect.WithCompressMinBytes(server.CompressMinBytes)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// cmd/cooldownd's http.Server without TLS, --read-timeout at its default.
	return server.NewHTTPServer(mux, server.HTTPOptions{ReadHeaderTimeout: 5 * time.Second}).Serve(ln)
}

// startNoop starts this binary as a no-op server (with redisAddr: the
// EVALSHA return 1 variant) on a free loopback port.
func startNoop(ctx context.Context, ps *proctest.Group, name, redisAddr string) (replica, error) {
	exe, err := os.Executable()
	if err != nil {
		return replica{}, err
	}
	return startServing(ctx, ps, name, func(addr string) *exec.Cmd {
		args := []string{"-noop-server", addr}
		if redisAddr != "" {
			args = append(args, "-noop-redis", redisAddr)
		}
		return exec.Command(exe, args...)
	})
}
