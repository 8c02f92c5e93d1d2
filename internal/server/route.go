package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/store"
)

// Routing's cadence (decision 0064): each replica renews its registration
// among the live peers every peerEvery; one that misses peerLapse of
// renewals is no longer an owner.
const (
	peerEvery = time.Second
	peerLapse = 3 * peerEvery
	// peerMaxBatches and peerMaxKeyed bound one Merge (a flush sends
	// more Merges when it holds more): well under peerMaxBytes.
	peerMaxBatches = 1024
	peerMaxKeyed   = 8192
	peerMaxBytes   = 4 << 20
)

// PeerOptions route a coalescing replica's batches to their connection's
// owner among the live replicas (see [Server.RouteCoalesced]).
type PeerOptions struct {
	// Address is this replica's host:port as its peers reach it (a pod's
	// IP and the serving port).
	Address string
	// Token is the secret every replica shares; PeerService calls carry it
	// and nothing else authenticates them.
	Token string
	// TLS: peers are reached over https (verified by Client's transport:
	// their certificates must name their addresses), else plain HTTP/1.1.
	TLS bool
	// Client carries the Merge and Settle calls; nil: one with a 5 s
	// timeout.
	Client *http.Client
}

// peerStore is what the router keeps its membership in (the store).
type peerStore interface {
	Peers(ctx context.Context, self string, ttl time.Duration) ([]string, error)
}

// router picks each connection's owner among the live replicas
// (rendezvous hashing: every replica with the same view picks the same
// one, and a replica joining or leaving moves only the connections it
// gains or held) and carries Merge and Settle to it.
type router struct {
	self    string
	token   string
	scheme  string
	hc      *http.Client
	st      peerStore
	log     *slog.Logger
	live    atomic.Pointer[[]string] // sorted; nil until the first renewal
	mu      sync.Mutex
	clients map[string]cooldownv1connect.PeerServiceClient
	stop    chan struct{}
	done    chan struct{}
}

func newRouter(st peerStore, log *slog.Logger, o PeerOptions) (*router, error) {
	if o.Address == "" || len(o.Address) > store.MaxPeerAddress || strings.ContainsAny(o.Address, "/ ") {
		return nil, fmt.Errorf("server: peer address %q: want host:port", o.Address)
	}
	if len(o.Token) < 16 {
		return nil, errors.New("server: the peer token must be at least 16 bytes")
	}
	r := &router{self: o.Address, token: o.Token, scheme: "http://", hc: o.Client, st: st, log: log,
		clients: map[string]cooldownv1connect.PeerServiceClient{}}
	if o.TLS {
		r.scheme = "https://"
	}
	if r.hc == nil {
		r.hc = &http.Client{Timeout: 5 * time.Second}
	}
	return r, nil
}

// owner is key's owner among the live replicas; remote false: this
// replica (also while it knows no peers).
func (r *router) owner(key connKey) (addr string, remote bool) {
	live := r.live.Load()
	if live == nil || len(*live) < 2 {
		return r.self, false
	}
	var best uint64
	for _, p := range *live {
		h := fnv.New64a()
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(key.tenant))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write(key.id[:])
		if v := h.Sum64(); addr == "" || v > best {
			addr, best = p, v
		}
	}
	return addr, addr != r.self
}

// renew registers this replica and learns the live ones. A failed
// renewal keeps the last view: its owners go on merging until their
// registrations lapse and a later renewal drops them.
func (r *router) renew(ctx context.Context, ttl time.Duration) {
	live, err := r.st.Peers(ctx, r.self, ttl)
	if err != nil {
		r.log.Warn("coalescing peers not renewed", "err", err)
		return
	}
	if ttl > 0 && !slices.Contains(live, r.self) {
		live = append(live, r.self)
		slices.Sort(live)
	}
	r.live.Store(&live)
	r.mu.Lock()
	for addr := range r.clients { // peers gone (pod IPs churn)
		if !slices.Contains(live, addr) {
			delete(r.clients, addr)
		}
	}
	r.mu.Unlock()
}

// run renews every peerEvery until close.
func (r *router) run() {
	defer close(r.done)
	t := time.NewTicker(peerEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), peerEvery)
		r.renew(ctx, peerLapse)
		cancel()
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

func (r *router) start() {
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	go r.run()
}

// close stops renewing and deregisters this replica, so that its peers
// stop sending it batches at their next renewal.
func (r *router) close(ctx context.Context) {
	if r.stop == nil {
		return
	}
	close(r.stop)
	<-r.done
	r.stop = nil
	if _, err := r.st.Peers(ctx, r.self, 0); err != nil {
		r.log.Warn("coalescing peer not deregistered", "err", err)
	}
	none := []string{}
	r.live.Store(&none)
}

// client is the PeerService client of addr.
func (r *router) client(addr string) cooldownv1connect.PeerServiceClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clients[addr]
	if !ok {
		c = cooldownv1connect.NewPeerServiceClient(r.hc, r.scheme+addr, connect.WithInterceptors(peerToken(r.token)))
		r.clients[addr] = c
	}
	return c
}

// peerToken sends the peers' token with every call.
func peerToken(token string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
}

// peerAuth refuses a PeerService call without the peers' token (bearerIs;
// PeerService has no streams).
func peerAuth(token string) connect.Interceptor {
	want := sha256.Sum256([]byte(token))
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if !bearerIs(req.Header(), want) {
				return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("peer token required"))
			}
			return next(ctx, req)
		}
	})
}

// merge sends addr one Merge of jobs' batches and answers, per batch in
// order, whether addr took it and what addr had learned of its
// connection.
func (r *router) merge(ctx context.Context, addr string, batches []*cooldownv1.PeerBatch) (*cooldownv1.MergeResponse, error) {
	res, err := r.client(addr).Merge(ctx, connect.NewRequest(&cooldownv1.MergeRequest{Batches: batches}))
	if err != nil {
		return nil, err
	}
	if len(res.Msg.GetAccepted()) != len(batches) || len(res.Msg.GetLearned()) != len(batches) {
		return nil, fmt.Errorf("peer %s answered %d of %d batches", addr, len(res.Msg.GetAccepted()), len(batches))
	}
	return res.Msg, nil
}

// settle asks addr to apply what it holds of key now.
func (r *router) settle(ctx context.Context, addr string, key connKey, label string) error {
	_, err := r.client(addr).Settle(ctx, connect.NewRequest(&cooldownv1.SettleRequest{
		Connection: &cooldownv1.PeerConnection{Tenant: key.tenant, Id: key.id[:], Label: label}}))
	return err
}
