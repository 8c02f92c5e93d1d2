package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cooldownd/cooldownd/internal/store"
)

// storeError maps an error of store operation op to a Connect error. It is
// the one place domain errors become wire codes; messages never carry key
// material. Only a store that cannot be reached in time is unavailable
// (clients degrade on it); a script error, WRONGTYPE, NOPERM, CROSSSLOT or
// a malformed reply is internal. Both are logged with their cause, at most
// once per interval per operation and class.
func (s *Server) storeError(ctx context.Context, op string, err error) error {
	var ce *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return err
	case errors.Is(err, store.ErrLeaseNotHeld):
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("lease not held: it expired or was settled"))
	case errors.Is(err, store.ErrTooManyConnections):
		return connect.NewError(connect.CodeResourceExhausted, errors.New("the tenant's connection cap is reached; idle connections expire, or raise --max-connections-per-tenant"))
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller left (or the server is stopping): its own context, not
		// the store, ended the call.
		return connect.NewError(connect.CodeCanceled, errors.New("request canceled"))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("request deadline exceeded"))
	case errors.Is(err, store.ErrUnavailable):
		s.errLog.log(ctx, slog.LevelWarn, "state store unavailable", op, err)
		if timedOut(err) {
			return connect.NewError(connect.CodeUnavailable, errors.New("state store timed out"))
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("state store unavailable"))
	}
	s.errLog.log(ctx, slog.LevelError, "state store error", op, err)
	return connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// timedOut reports whether err is a timeout (the store timeout, a socket
// deadline) rather than a refused or broken connection.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// errorLogEvery is how often one kind of store error is logged.
const errorLogEvery = 10 * time.Second

// errorLog logs errors at most once per interval per (operation, level),
// counting the ones it holds back, so a Redis outage or a broken key costs
// one log line per interval instead of one per request. The keys are a
// fixed set (operations × levels), so the map stays small.
type errorLog struct {
	out   *slog.Logger
	now   func() time.Time
	every time.Duration

	mu   sync.Mutex
	last map[errorKey]*errorSeen
}

type errorKey struct {
	op    string
	level slog.Level
}

type errorSeen struct {
	at         time.Time
	suppressed int
}

func newErrorLog(log *slog.Logger, now func() time.Time) *errorLog {
	return &errorLog{out: log, now: now, every: errorLogEvery, last: map[errorKey]*errorSeen{}}
}

func (l *errorLog) log(ctx context.Context, level slog.Level, msg, op string, err error) {
	k := errorKey{op, level}
	now := l.now()
	l.mu.Lock()
	seen := l.last[k]
	if seen != nil && now.Sub(seen.at) < l.every {
		seen.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := 0
	if seen != nil {
		suppressed = seen.suppressed
	}
	l.last[k] = &errorSeen{at: now}
	l.mu.Unlock()
	l.out.Log(ctx, level, msg, "op", op, "err", err.Error(), "suppressed_since_last", suppressed)
}
