package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/keys"
	"github.com/cooldownd/cooldownd/internal/store"
)

// peerMaxCount bounds a batch's unkeyed count: a replica's sum over one
// interval stays far below it.
const peerMaxCount = 1 << 40

// peerService serves PeerService (decision 0064): what the replicas that
// route to this one hand it.
type peerService struct{ s *Server }

func (p peerService) Merge(ctx context.Context, req *connect.Request[cooldownv1.MergeRequest]) (*connect.Response[cooldownv1.MergeResponse], error) {
	bs := req.Msg.GetBatches()
	if len(bs) > peerMaxBatches {
		return nil, errInvalid("batches", "at most %d, got %d", peerMaxBatches, len(bs))
	}
	in := make([]peerBatch, len(bs))
	keyed := 0
	for i, b := range bs {
		pb, err := parsePeerBatch(b)
		if err != nil {
			return nil, err
		}
		keyed += len(pb.keyed)
		in[i] = pb
	}
	if keyed > peerMaxKeyed {
		return nil, errInvalid("batches", "at most %d keyed reports, got %d", peerMaxKeyed, keyed)
	}
	k := p.s.coalesce
	if k == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this replica does not coalesce"))
	}
	res, err := k.merge(ctx, in, p.s.now())
	if err != nil {
		return nil, connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewResponse(res), nil
}

func (p peerService) Settle(ctx context.Context, req *connect.Request[cooldownv1.SettleRequest]) (*connect.Response[cooldownv1.SettleResponse], error) {
	key, label, err := parsePeerConn(req.Msg.GetConnection())
	if err != nil {
		return nil, err
	}
	if k := p.s.coalesce; k != nil {
		k.settleHeld(ctx, store.Conn{Tenant: key.tenant, ID: key.id, Label: label}, p.s.now)
	}
	return connect.NewResponse(&cooldownv1.SettleResponse{}), nil
}

// peerBatch is a PeerBatch checked.
type peerBatch struct {
	key    connKey
	label  string
	rev    uint64
	retry  bool
	count  int64
	keyed  []store.KeyedCount
	status int
	code   string
}

func parsePeerConn(c *cooldownv1.PeerConnection) (connKey, string, error) {
	if c == nil {
		return connKey{}, "", errInvalid("connection", "is required")
	}
	if err := keys.ValidateTenant(c.GetTenant()); err != nil {
		return connKey{}, "", errInvalid("connection.tenant", "%v", err)
	}
	id, err := parseID("connection.id", c.GetId())
	if err != nil {
		return connKey{}, "", err
	}
	if err := checkLabel(c.GetLabel()); err != nil {
		return connKey{}, "", errInvalid("connection.label", "%v", err)
	}
	return connKey{c.GetTenant(), id}, c.GetLabel(), nil
}

func parsePeerBatch(b *cooldownv1.PeerBatch) (peerBatch, error) {
	key, label, err := parsePeerConn(b.GetConnection())
	if err != nil {
		return peerBatch{}, err
	}
	if n := b.GetCount(); n < 0 || n > peerMaxCount {
		return peerBatch{}, errInvalid("count", "must be 0 to %d, got %d", int64(peerMaxCount), n)
	}
	if st := b.GetHttpStatus(); st != 0 && (st < MinHTTPStatus || st > MaxHTTPStatus) {
		return peerBatch{}, errInvalid("http_status", "must be 0 or an HTTP status code, got %d", st)
	}
	if err := checkCode("error_code", b.GetErrorCode()); err != nil {
		return peerBatch{}, err
	}
	out := peerBatch{key: key, label: label, rev: b.GetRevision(), retry: b.GetRetry(), count: b.GetCount(),
		status: int(b.GetHttpStatus()), code: b.GetErrorCode()}
	for _, kc := range b.GetKeyed() {
		if err := checkReportKey("keyed.key", kc.GetKey()); err != nil || kc.GetKey() == "" {
			return peerBatch{}, errInvalid("keyed.key", "must be %d to %d characters of [A-Za-z0-9_-]", MinReportKeyLen, MaxReportKeyLen)
		}
		if n := kc.GetCount(); n < 1 || n > MaxBatch {
			return peerBatch{}, errInvalid("keyed.count", "must be 1 to %d, got %d", MaxBatch, n)
		}
		out.keyed = append(out.keyed, store.KeyedCount{Key: kc.GetKey(), Count: kc.GetCount()})
	}
	if out.count == 0 && len(out.keyed) == 0 {
		return peerBatch{}, errInvalid("count", "a batch with no keyed report counts at least 1")
	}
	return out, nil
}

// merge takes batches a peer routed here, to be applied at this replica's
// next flush with its own: a batch joins the connection's pending batch of
// its retry flag when that one is at its revision, or starts it. It is
// refused (the peer applies it itself) when this replica is closing, past
// its bounds, or has learned the connection at another revision or holds
// its successes at one. Nothing is taken once ctx is done: the peer that
// gave up on the answer counts the batches as lost, not applied.
func (k *coalescer) merge(ctx context.Context, in []peerBatch, now time.Time) (*cooldownv1.MergeResponse, error) {
	out := &cooldownv1.MergeResponse{Accepted: make([]bool, len(in)), Learned: make([]*cooldownv1.PeerLearned, len(in))}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, pb := range in {
		e := k.entries[pb.key]
		out.Learned[i] = learnedOf(e, now)
		if k.closed || k.keyed+len(pb.keyed) > k.maxKeyed || (e != nil && !e.learned.IsZero() && e.rev != pb.rev) {
			continue
		}
		if e == nil {
			if len(k.entries) >= k.maxConns {
				continue
			}
			e = &coalesceEntry{}
			k.entries[pb.key] = e
		}
		if b := e.pending[retryIndex(pb.retry)]; b != nil && b.rev != pb.rev {
			continue
		}
		b := e.batchFor(pb.retry, pb.rev)
		b.peer = true
		b.count += pb.count
		for _, kc := range pb.keyed {
			k.holdKeyed(b, kc)
		}
		b.status, b.code = pb.status, pb.code
		if pb.label != "" {
			e.label = pb.label
		}
		out.Accepted[i] = true
	}
	return out, nil
}

// learnedOf is what e says of its connection, for a peer.
func learnedOf(e *coalesceEntry, now time.Time) *cooldownv1.PeerLearned {
	if e == nil || e.learned.IsZero() {
		return &cooldownv1.PeerLearned{}
	}
	return &cooldownv1.PeerLearned{Known: true, Healthy: e.healthy, Revision: e.rev, Shadow: e.shadow,
		ServerTime: timestamppb.New(e.at.Add(now.Sub(e.learned)))}
}

// peerOptions are PeerService's handler options: the peers' token, not a
// tenant's, and a bound on a Merge's size.
func (s *Server) peerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(peerMaxBytes),
		s.recoverOption(),
		connect.WithInterceptors(peerAuth(s.peers.token), s.timeoutInterceptor()),
	}
}
