package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/redistest"
	"github.com/cooldownd/cooldownd/internal/server"
)

// TestWatchEndsOnASubscriptionGap: when the replica's Redis subscription
// drops and go-redis re-subscribes, events in between are lost; the stream
// ends with unavailable and says so, so the client re-reads and watches
// again instead of showing a stale dashboard.
func TestWatchEndsOnASubscriptionGap(t *testing.T) {
	t.Parallel()
	rdb := redistest.Real(t)
	hs := timeoutServer(t, rdb, server.Options{})
	c := cooldownv1connect.NewCooldownServiceClient(hs.Client(), hs.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := c.WatchConnections(ctx, connect.NewRequest(&cooldownv1.WatchConnectionsRequest{}))
	require.NoError(t, err)
	require.True(t, stream.Receive(), "first heartbeat: %v", stream.Err())
	require.NoError(t, rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	for stream.Receive() {
	}
	requireCode(t, stream.Err(), connect.CodeUnavailable, "events may have been missed")
}
