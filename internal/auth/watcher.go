package auth

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Watcher serves the tokens of a file and reloads them when the file's
// content changes or Reload is called. A bad new file is logged and the
// previous tokens stay in force. It implements [Authenticator].
type Watcher struct {
	path  string
	log   *slog.Logger
	table atomic.Pointer[Table]
	mu    sync.Mutex // serialises reloads
	last  []byte
}

// NewWatcher loads path. It fails when the file is missing or invalid.
func NewWatcher(path string, log *slog.Logger) (*Watcher, error) {
	w := &Watcher{path: path, log: log}
	if _, err := w.Reload(); err != nil {
		return nil, err
	}
	return w, nil
}

// Authenticate implements [Authenticator].
func (w *Watcher) Authenticate(token string) (Identity, bool) {
	return w.table.Load().Authenticate(token)
}

// Reload re-reads the file; it reports whether the tokens changed.
func (w *Watcher) Reload() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := readBounded(w.path)
	if err != nil {
		return false, err
	}
	if w.last != nil && bytes.Equal(data, w.last) {
		return false, nil
	}
	t, err := Parse(data)
	if err != nil {
		return false, err
	}
	w.table.Store(t)
	w.last = data
	return true, nil
}

// Run polls the file every interval until ctx ends, reloading on change.
func (w *Watcher) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.reloadAndLog(ctx)
		}
	}
}

func (w *Watcher) reloadAndLog(ctx context.Context) {
	changed, err := w.Reload()
	switch {
	case err != nil:
		w.log.ErrorContext(ctx, "tokens file not reloaded; keeping the previous tokens", "path", w.path, "err", err)
	case changed:
		w.log.InfoContext(ctx, "tokens reloaded", "path", w.path, "tokens", w.table.Load().Len())
	}
}

// ReloadNow reloads and logs the result (for SIGHUP).
func (w *Watcher) ReloadNow(ctx context.Context) { w.reloadAndLog(ctx) }

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: open tokens file: %w", err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("auth: read tokens file: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidTokens, MaxFileBytes)
	}
	return data, nil
}
