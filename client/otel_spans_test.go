package client

import (
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// otelSpans is testdata/otel_spans.json: the spans both clients make, each
// with its kind and the attribute keys it may carry, and each event's keys.
// clients/ts/test/otel.test.ts holds the TypeScript client to it.
type otelSpans struct {
	Spans map[string]struct {
		Kind       string   `json:"kind"`
		Attributes []string `json:"attributes"`
	} `json:"spans"`
	Events map[string][]string `json:"events"`
}

// TestSpansMatchTheSharedList: every span the Go client makes over a denied,
// a retried, a failed and a healthy call is named in the shared list, has its
// kind and carries only its keys; every event carries exactly its keys. A
// span or attribute renamed on one side fails here or in the TS test.
func TestSpansMatchTheSharedList(t *testing.T) {
	t.Parallel()
	want := readFixture[otelSpans](t, "otel_spans.json")
	tests := []struct {
		name    string
		replies []reply
		denies  int
		opts    []Option
	}{
		{name: "healthy", replies: []reply{{status: 200}}},
		{name: "denied then allowed", replies: []reply{{status: 200}}, denies: 1},
		{name: "denied to the end", replies: []reply{{status: 200}}, denies: 1, opts: []Option{WithNoWait()}},
		{name: "retried", replies: []reply{{status: 500}, {status: 200}}, opts: []Option{WithBackoff(time.Second, time.Second)}},
		{name: "failed", replies: []reply{{status: 400}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				f := newFakeService(noTripPolicy())
				var n atomic.Int32
				f.answerAdmit(func(_ *cooldownv1.AdmitRequest, r *cooldownv1.AdmitResponse) {
					if int(n.Add(1)) <= tt.denies {
						r.Decision, r.DenyReason, r.RetryAfter = cooldownv1.Decision_DECISION_DENY, cooldownv1.DenyReason_DENY_REASON_COOLDOWN, durationpb.New(time.Second)
					}
				})
				tp := &recTP{}
				c, err := f.client(append([]Option{WithTracerProvider(tp)}, tt.opts...)...)
				require.NoError(t, err)
				call, _ := scripted(tt.replies...)
				_, _ = c.Do(t.Context(), NewConn(ID{7}, "test"), call)

				tp.mu.Lock()
				spans := slices.Clone(tp.spans)
				tp.mu.Unlock()
				require.NotEmpty(t, spans)
				for _, s := range spans {
					w, ok := want.Spans[s.name]
					if !assert.True(t, ok, "span %s is not in testdata/otel_spans.json", s.name) {
						continue
					}
					kind := trace.SpanKindInternal
					if w.Kind == "client" {
						kind = trace.SpanKindClient
					}
					got := s.kind
					if got == trace.SpanKindUnspecified {
						got = trace.SpanKindInternal // the SDK's default
					}
					assert.Equal(t, kind, got, "%s: kind", s.name)
					s.mu.Lock()
					for _, kv := range s.attrs {
						assert.Contains(t, w.Attributes, string(kv.Key), "%s: attribute", s.name)
					}
					for _, ev := range s.events {
						keys, ok := want.Events[ev.name]
						require.True(t, ok, "event %s is not in the shared list", ev.name)
						var evKeys []string
						for _, kv := range ev.attrs {
							evKeys = append(evKeys, string(kv.Key))
						}
						assert.ElementsMatch(t, keys, evKeys, "%s: attributes", ev.name)
					}
					s.mu.Unlock()
				}
			})
		})
	}
}
