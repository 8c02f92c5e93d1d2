package server

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/store"
)

const testPeerToken = "peer-token-of-the-test-fleet"

// connCommands counts the commands a replica sends Redis that name one
// connection (its id in a key) and that Redis ran (an EVALSHA answered
// NOSCRIPT, then sent again as EVAL, counts once).
type connCommands struct {
	id string
	n  *atomic.Int64
}

func (h connCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h connCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return err
		}
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.Contains(s, h.id) {
				h.n.Add(1)
				break
			}
		}
		return err
	}
}

func (h connCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// routedReplica is one routing replica: its own Redis client and store
// (as its own process), serving HTTP/1.1 on loopback.
type routedReplica struct {
	srv  *Server
	addr string
	hs   *http.Server
	c    cooldownv1connect.CooldownServiceClient
}

func routedFleet(t *testing.T, addr string, n int, id keys.ID, sent *atomic.Int64) []*routedReplica {
	t.Helper()
	var out []*routedReplica
	for range n {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(connCommands{id: id.String(), n: sent})
		st, err := store.New(rdb, store.Options{})
		require.NoError(t, err)
		srv, err := New(Options{Store: st, Logger: quietLog()})
		require.NoError(t, err)
		srv.StartCoalescing(time.Hour) // the test flushes
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		require.NoError(t, srv.RouteCoalesced(PeerOptions{Address: ln.Addr().String(), Token: testPeerToken}))
		hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		r := &routedReplica{srv: srv, addr: ln.Addr().String(), hs: hs,
			c: cooldownv1connect.NewCooldownServiceClient(http.DefaultClient, "http://"+ln.Addr().String())}
		t.Cleanup(func() {
			_ = hs.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.StopCoalescing(ctx)
		})
		out = append(out, r)
	}
	for range 2 { // registered all, then every replica sees them all
		for _, r := range out {
			r.srv.peers.renew(t.Context(), peerLapse)
		}
	}
	return out
}

// TestRoutedFleetOnRealRedis: three replicas, each its own store and
// Redis client, coalescing one connection's successes: the two that do
// not own it route their batches over PeerService, and Redis sees the
// connection once for the three replicas' interval (one batch script),
// with every success counted; the owner down, the others apply their own.
// Fails if a non-owner's batch reaches Redis, if a count is lost, or if
// PeerService takes a call without the peers' token.
func TestRoutedFleetOnRealRedis(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	addr := rdb.Options().Addr
	var sent atomic.Int64
	idb := make([]byte, 32)
	copy(idb, "routed-fleet-connection-id-0001")
	id, err := keys.IDFromBytes(idb)
	require.NoError(t, err)
	fleet := routedFleet(t, addr, 3, id, &sent)
	ctx := t.Context()
	key := connKey{"default", id}
	ownerAddr, _ := fleet[0].srv.peers.owner(key)
	var owner *routedReplica
	var others []*routedReplica
	for _, r := range fleet {
		o, _ := r.srv.peers.owner(key)
		require.Equal(t, ownerAddr, o, "one view, one owner")
		if r.addr == ownerAddr {
			owner = r
		} else {
			others = append(others, r)
		}
	}
	require.NotNil(t, owner)

	report := func(r *routedReplica, count uint32) *cooldownv1.ReportResponse {
		res, err := r.c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: &cooldownv1.Connection{Id: idb},
			Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, HttpStatus: 200, Count: count}))
		require.NoError(t, err)
		return res.Msg
	}
	reader, err := store.New(rdb, store.Options{}) // not counted
	require.NoError(t, err)
	successes := func() int64 {
		s, _, err := reader.Get(ctx, "default", id, 0)
		require.NoError(t, err)
		return s.State.Successes
	}
	for _, r := range fleet { // each replica learns the connection healthy
		report(r, 1)
	}
	require.Equal(t, int64(3), successes())
	for i, r := range fleet {
		for range 5 {
			res := report(r, uint32(i+1))
			require.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, res.GetApplied())
		}
	}
	before := sent.Load()
	for _, r := range others {
		r.srv.coalesce.flush(ctx, time.Now)
	}
	assert.Equal(t, before, sent.Load(), "the non-owners' batches went to the owner, not to Redis")
	assert.Equal(t, int64(3), successes())
	owner.srv.coalesce.flush(ctx, time.Now)
	assert.Equal(t, int64(1), sent.Load()-before, "one batch script for three replicas")
	assert.Equal(t, int64(3+5*(1+2+3)), successes(), "every success counted once")

	// PeerService refuses a call without the peers' token, or with
	// another one, and takes nothing.
	for _, tok := range []string{"", "not-the-peer-token-of-the-fleet"} {
		pc := cooldownv1connect.NewPeerServiceClient(http.DefaultClient, "http://"+owner.addr, connect.WithInterceptors(peerToken(tok)))
		_, err := pc.Settle(ctx, connect.NewRequest(&cooldownv1.SettleRequest{Connection: &cooldownv1.PeerConnection{Tenant: "default", Id: idb}}))
		assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "Settle: %v", err)
		_, err = pc.Merge(ctx, connect.NewRequest(&cooldownv1.MergeRequest{Batches: []*cooldownv1.PeerBatch{{
			Connection: &cooldownv1.PeerConnection{Tenant: "default", Id: idb}, Count: 1000}}}))
		assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "Merge: %v", err)
	}
	conns, _ := owner.srv.coalesce.pending()
	assert.Zero(t, conns, "nothing merged without the token")

	// The owner down: each of the others applies its own batch (one
	// script each), none lost.
	require.NoError(t, owner.hs.Close())
	for _, r := range others {
		res := report(r, 10)
		require.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, res.GetApplied())
	}
	before = sent.Load()
	for _, r := range others {
		r.srv.coalesce.flush(ctx, time.Now)
	}
	assert.Equal(t, int64(len(others)), sent.Load()-before, "each sender applied its own")
	assert.Equal(t, int64(3+5*(1+2+3)+20), successes(), "applied by the senders: nothing lost")
}

// TestRoutedFailureAfterRoutedSuccesses: a failure a replica applies at
// once reaches Redis after the successes it routed to the owner a moment
// before (Settle): the failure meets a window that holds them. Fails if
// the owner still holds them when the failure is applied.
func TestRoutedFailureAfterRoutedSuccesses(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	var sent atomic.Int64
	idb := make([]byte, 32)
	copy(idb, "routed-fleet-connection-id-0002")
	id, err := keys.IDFromBytes(idb)
	require.NoError(t, err)
	fleet := routedFleet(t, rdb.Options().Addr, 2, id, &sent)
	ctx := t.Context()
	ownerAddr, _ := fleet[0].srv.peers.owner(connKey{"default", id})
	sender := fleet[0]
	if sender.addr == ownerAddr {
		sender = fleet[1]
	}
	conn := &cooldownv1.Connection{Id: idb}
	_, err = sender.c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS}))
	require.NoError(t, err)
	res, err := sender.c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn, Outcome: cooldownv1.Outcome_OUTCOME_SUCCESS, Count: 9}))
	require.NoError(t, err)
	require.Equal(t, cooldownv1.ReportApplied_REPORT_APPLIED_COALESCED, res.Msg.GetApplied())
	sender.srv.coalesce.flush(ctx, time.Now) // routed: the owner holds 9
	_, err = sender.c.Report(ctx, connect.NewRequest(&cooldownv1.ReportRequest{Connection: conn, Outcome: cooldownv1.Outcome_OUTCOME_TRANSIENT_FAILURE, HttpStatus: 503}))
	require.NoError(t, err)
	s, _, err := sender.srv.store.Get(ctx, "default", id, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(10), s.State.Successes, "the routed successes were applied before the failure")
}
