package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// ErrInternal wraps every store failure that retrying will not cure: a
// script error, a key of the wrong type (WRONGTYPE), a missing ACL grant
// (NOPERM), keys in several Cluster slots (CROSSSLOT), a wrong password, a
// malformed reply. It is a bug or a misconfiguration, never an outage, so
// it must not make clients degrade; the cause is in the wrapped error.
var ErrInternal = errors.New("store: internal error")

// transientReplies are the Redis error codes of a server that cannot
// answer now but will: loading, a replica that is read-only during a
// failover, a master or cluster that is down, a busy script, resharding,
// a full server, no replicas for min-replicas-to-write.
var transientReplies = []string{
	"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "MOVED", "ASK", "NOREPLICAS", "OOM",
}

// unavailable classifies a failed Redis call of operation op. Connection
// failures, timeouts and the transient replies above wrap
// [ErrUnavailable]; everything else wraps [ErrInternal]. Context errors
// stay visible to errors.Is (the caller decides whether its own deadline
// or the store timeout ran out). A Lua error names the script file and
// line it came from (explainScriptError).
func unavailable(op string, err error) error {
	err = explainScriptError(err)
	if transient(err) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrInternal, op, err)
}

// transient reports whether err means Redis could not be reached or
// could not answer in time.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		code, _, _ := strings.Cut(rerr.Error(), " ")
		for _, t := range transientReplies {
			if code == t {
				return true
			}
		}
		return strings.HasPrefix(rerr.Error(), "ERR max number of clients reached")
	}
	var nerr net.Error
	return errors.As(err, &nerr)
}
