package main

import (
	"flag"
	"regexp"
	"slices"
	"strings"
)

// environ is the environment cooldownd reads, as KEY=value pairs:
// os.Environ() in main, a fixed list in tests.
type environ []string

// get returns the value of k, "" when unset.
func (e environ) get(k string) string {
	for _, kv := range e { // the first one wins, as in os.Getenv
		if name, v, ok := strings.Cut(kv, "="); ok && name == k {
			return v
		}
	}
	return ""
}

// envOnly are COOLDOWND_* variables that are not flags but are read.
var envOnly = []string{
	"COOLDOWND_REDIS_PASSWORD", // the Redis password, kept off the command line
	"COOLDOWND_TOKEN",          // the applications' bearer token (README); the server ignores it
}

// serviceLink matches the variables Kubernetes injects for a Service named
// cooldownd[-…] when enableServiceLinks is on (COOLDOWND_PORT,
// COOLDOWND_SERVICE_HOST, COOLDOWND_PORT_8080_TCP_ADDR, …).
var serviceLink = regexp.MustCompile(`^COOLDOWND(_[A-Z0-9]+)*_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$`)

// unknown returns the COOLDOWND_* variables that set no flag of fs, sorted.
func (e environ) unknown(fs *flag.FlagSet) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = f.Name != "version" }) // --version is an action: no variable sets it
	for _, k := range envOnly {
		known[k] = true
	}
	var out []string
	for _, kv := range e {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "COOLDOWND_") && !known[name] && !serviceLink.MatchString(name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// expectedFormat says what a flag's value must look like, for errors.
func expectedFormat(f *flag.Flag) string {
	kind, _ := flag.UnquoteUsage(f)
	switch kind {
	case "duration":
		return "a duration such as 250ms, 30s, 5m or 1h"
	case "int":
		return "an integer"
	case "float":
		return "a number such as 0.5"
	case "":
		return "true or false"
	}
	return "a " + kind
}
