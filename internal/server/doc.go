// Package server implements cooldownd's Connect services (CooldownService
// and AdminService) on top of internal/store, and mounts them with gRPC
// health and reflection on one http.Handler. cmd/cooldownd only wires it.
package server
