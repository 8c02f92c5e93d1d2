// Module apidiff pins golang.org/x/exp/cmd/apidiff, which make apicheck runs
// on the client module (decision 0043). It is its own module so that x/exp
// and x/tools stay out of the root go.mod and out of the client's graph.
module github.com/cooldownd/cooldownd/tools/apidiff

go 1.26.0

tool golang.org/x/exp/cmd/apidiff

require github.com/stretchr/testify v1.12.1

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/exp v0.0.0-20261113113407-e3970619a1a4 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/tools v0.52.1-0.20261106145633-d407941a339a // indirect
)
