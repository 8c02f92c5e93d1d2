package charttest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTracingValues: tracing is off by default (no OTEL_* variable); an
// endpoint renders the standard variables the OpenTelemetry SDK reads
// (docs/observability.md); the schema refuses a sampler or an endpoint
// cooldownd would refuse.
func TestTracingValues(t *testing.T) {
	t.Parallel()
	_, c := deployment(t, render(t, map[string]any{}))
	for k := range envOf(c) {
		assert.NotRegexp(t, `^OTEL_`, k, "tracing is off by default")
	}
	_, c = deployment(t, render(t, setValues(t, "tracing.endpoint=http://otel-collector.observability:4318",
		"tracing.sampler=parentbased_traceidratio", "tracing.samplerArg=0.25")))
	env := envOf(c)
	assert.Equal(t, "http://otel-collector.observability:4318", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
	assert.Equal(t, "cooldownd", env["OTEL_SERVICE_NAME"])
	assert.Equal(t, "parentbased_traceidratio", env["OTEL_TRACES_SAMPLER"])
	assert.Equal(t, "0.25", env["OTEL_TRACES_SAMPLER_ARG"])
	for _, bad := range []string{"tracing.sampler=sometimes", "tracing.endpoint=otel-collector:4318", "tracing.samplerArg=1.5"} {
		_, err := tryRender(t, setValues(t, "tracing.endpoint=http://c:4318", bad))
		require.Error(t, err, bad)
	}
}
