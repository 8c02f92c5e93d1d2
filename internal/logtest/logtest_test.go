package logtest

import (
	"log/slog"
	"testing"
)

func TestRecords(t *testing.T) {
	t.Parallel()
	var b Buffer
	l := slog.New(slog.NewJSONHandler(&b, nil))
	l.Info("start", slog.Group("policy", slog.String("open_base", "10s"), slog.Int("max_probes", 1)))
	l.Warn("other")
	recs, err := b.Records()
	if err != nil || len(recs) != 2 {
		t.Fatalf("Records() = %v, %v; want 2 records", recs, err)
	}
	tests := []struct {
		path string
		want any
	}{
		{"msg", "start"}, {"level", "INFO"}, {"policy.open_base", "10s"}, {"policy.max_probes", 1.0}, {"policy.nope", nil}, {"msg.deeper", nil},
	}
	for _, tt := range tests {
		if got := recs[0].Get(tt.path); got != tt.want {
			t.Errorf("Get(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
	if got := recs[0].Str("policy.max_probes"); got != "" {
		t.Errorf("Str of a number = %q, want empty", got)
	}
	if got := b.Find("other"); len(got) != 1 || got[0].Str("level") != "WARN" {
		t.Errorf("Find(other) = %v", got)
	}
	_, _ = b.Write([]byte("redis: 2026/03/01 pool.go:770: plain text\n"))
	if _, err := b.Records(); err == nil {
		t.Error("Records() accepted a line that is not JSON")
	}
	if got := b.Find("start"); len(got) != 1 {
		t.Errorf("Find skips lines that are not JSON; got %v", got)
	}
}
