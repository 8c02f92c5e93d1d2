package server

import (
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWatchStreamsAreCapped(t *testing.T) {
	t.Parallel()
	s := &Server{}
	var releases []func()
	for range MaxWatchesPerTenant {
		r, err := s.openWatch("a")
		require.NoError(t, err)
		releases = append(releases, r)
	}
	_, err := s.openWatch("a")
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "per tenant")
	r, err := s.openWatch("b")
	require.NoError(t, err, "another tenant is not affected")
	r()
	releases[0]()
	r, err = s.openWatch("a")
	require.NoError(t, err, "a closed stream frees its place")
	r()
	for _, r := range releases[1:] {
		r()
	}
	assert.Empty(t, s.watching)
}
