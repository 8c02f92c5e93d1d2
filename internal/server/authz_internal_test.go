package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// TestEveryProcedureHasRoles: the authorisation table names every
// procedure of the contract, and nothing else, so a new RPC cannot ship
// open (or unreachable) by omission.
func TestEveryProcedureHasRoles(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	svcs := cooldownv1.File_v1_cooldown_proto.Services()
	for i := range svcs.Len() {
		sd := svcs.Get(i)
		for j := range sd.Methods().Len() {
			p := fmt.Sprintf("/%s/%s", sd.FullName(), sd.Methods().Get(j).Name())
			seen[p] = true
			assert.NotEmpty(t, procedureRoles[p], "%s has no roles", p)
		}
	}
	for p := range procedureRoles {
		assert.True(t, seen[p], "%s is in the table but not in the contract", p)
	}
}

func TestNeededRoles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		procedure string
		want      []Role
	}{
		{"/cooldown.v1.CooldownService/Admit", []Role{RoleClient, RoleAdmin}},
		{"/cooldown.v1.CooldownService/GetConnection", []Role{RoleViewer, RoleAdmin, RoleOperator}},
		{"/cooldown.v1.CooldownService/WatchConnections", []Role{RoleClient, RoleViewer, RoleAdmin, RoleOperator}},
		{"/cooldown.v1.AdminService/ForceConnection", []Role{RoleAdmin}},
		{"/cooldown.v1.AdminService/Nope", nil},
	}
	for _, tt := range tests {
		t.Run(tt.procedure, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, NeededRoles(tt.procedure))
		})
	}
}

func TestHuman(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
	}{
		{"0s", "0s"}, {"-1s", "0s"}, {"950ms", "950ms"}, {"1.23456s", "1.2s"}, {"29s", "29s"},
		{"4m10s", "4m10s"}, {"5m", "5m"}, {"2h5m10s", "2h5m"}, {"720h", "720h"}, {"1h0m31s", "1h1m"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, human(mustDuration(t, tt.in)))
		})
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
