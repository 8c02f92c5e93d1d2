package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
	"github.com/cooldownd/cooldownd/internal/breaker"
)

// TestPolicyProtoCoversEveryKnob: every knob of the table is a field of
// the wire Policy named by its key, of its kind (a Span a Duration, a
// Count a uint32, a Ratio a double, a Switch a bool), and policyProto
// carries its value; the wire Policy has no other field. A knob added to
// the table without its proto field fails here.
func TestPolicyProtoCoversEveryKnob(t *testing.T) {
	t.Parallel()
	fields := (&cooldownv1.Policy{}).ProtoReflect().Descriptor().Fields()
	require.Equal(t, len(breaker.Knobs()), fields.Len(), "one field per knob")
	want := map[breaker.Kind]protoreflect.Kind{breaker.Count: protoreflect.Uint32Kind, breaker.Ratio: protoreflect.DoubleKind,
		breaker.Switch: protoreflect.BoolKind, breaker.Span: protoreflect.MessageKind}
	for _, k := range breaker.Knobs() {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			f := fields.ByName(protoreflect.Name(k.Key()))
			require.NotNil(t, f, "cooldownv1.Policy has no %s", k.Key())
			require.Equal(t, want[k.Kind], f.Kind())
			if k.Kind == breaker.Span {
				require.Equal(t, protoreflect.FullName("google.protobuf.Duration"), f.Message().FullName())
			}
			p := breaker.DefaultPolicy()
			v := map[breaker.Kind]float64{breaker.Count: 3, breaker.Ratio: 0.25, breaker.Span: float64(7 * time.Second), breaker.Switch: 1}[k.Kind]
			k.Set(&p, v)
			got := policyProto(p).ProtoReflect().Get(f)
			switch k.Kind {
			case breaker.Span:
				d := got.Message().Interface().(interface{ AsDuration() time.Duration })
				assert.Equal(t, 7*time.Second, d.AsDuration())
			case breaker.Count:
				assert.Equal(t, uint32(3), uint32(got.Uint()))
			case breaker.Ratio:
				assert.InDelta(t, 0.25, got.Float(), 0)
			case breaker.Switch:
				assert.True(t, got.Bool())
			}
		})
	}
	// Unset: a zero duration is no field.
	p := breaker.DefaultPolicy()
	p.LeaseTTLMax = 0
	assert.Nil(t, policyProto(p).LeaseTtlMax)
	assert.Equal(t, 10*time.Minute, policyProto(breaker.DefaultPolicy()).LeaseTtlMax.AsDuration())
}
