module github.com/cooldownd/cooldownd/client

go 1.26.0

replace (
	github.com/cooldownd/cooldownd/api => ../api
	github.com/cooldownd/cooldownd/internal/breaker => ../internal/breaker
	github.com/cooldownd/cooldownd/internal/keys => ../internal/keys
)

require (
	connectrpc.com/connect v1.21.1
	github.com/cooldownd/cooldownd/api v0.0.0-00010101000000-000000000000
	github.com/cooldownd/cooldownd/internal/breaker v0.0.0-00010101000000-000000000000
	github.com/cooldownd/cooldownd/internal/keys v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
