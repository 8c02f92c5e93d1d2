// Command cooldownctl is the operator CLI of cooldownd: it lists, inspects,
// watches, resets and forces connections of a running server through the
// same Connect API and bearer tokens as the dashboard.
//
//	cooldownctl [global flags] list [--state open] [--limit N]
//	cooldownctl [global flags] get <id> [--history N]
//	cooldownctl [global flags] watch [--snapshot=false]
//	cooldownctl [global flags] reset <id> --reason TEXT
//	cooldownctl [global flags] force <id> open|closed|clear [--for 10m] --reason TEXT
//	cooldownctl version
//
// An <id> is the connection's 64 hex digits, its base64 (as protojson and
// other tools print bytes), or a unique prefix of at least 4 hex digits (the
// tables print 8). Output always shows ids in hex, JSON included. Global
// flags (--server, --token-file, -o, --tenant) may come before or after the
// command. The token comes from
// COOLDOWNCTL_TOKEN, --token-file or COOLDOWNCTL_TOKEN_FILE; it is never
// printed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/cmd/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is a command-line mistake (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitCode prints err and returns the process exit status: 0 on success,
// 2 for usage errors, 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "cooldownctl: %v\nRun 'cooldownctl help' for usage.\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "cooldownctl: %v\n", err)
	return 1
}

const usage = `Usage: cooldownctl [global flags] <command> [arguments]

Operate a running cooldownd: list, inspect, watch, reset and force connections.

Commands:
  list [--state S] [--sort severity|id] [--limit N]
                               list the connections, most severe first (open, then half-open,
                               then closed with failures)
  get <id>                     show one connection (shadow mode, fleet counts), its policy and its
                               recent transitions
  watch                        stream state changes as they happen (Ctrl-C stops)
  reset <id> --reason TEXT     reset a connection to closed (admin)
  force <id> open|closed|clear [--for 10m] --reason TEXT
                               force a connection open or closed, or clear the override (admin)
  version                      print cooldownctl's version

An <id> is the connection's 64 hex digits, its base64, or a unique prefix of at least 4 hex
digits (tables print the first 8). An id cooldownd holds no state for is "not found" (exit 1).
Output shows ids in hex, in JSON too (which is otherwise protojson).

Roles: list, get and watch need a viewer, admin or operator token; reset and force an admin
token of the connection's tenant. An operator token reads every tenant: list and watch show
all of them (a TENANT column), get needs --tenant or an id prefix to find the tenant by.

Global flags (before or after the command):
  --server URL       cooldownd base URL (env COOLDOWNCTL_SERVER, default http://127.0.0.1:8080)
  --token-file PATH  file holding the bearer token (env COOLDOWNCTL_TOKEN_FILE)
  --token TOKEN      the bearer token; prefer env COOLDOWNCTL_TOKEN or --token-file,
                     since command lines are visible to other users
  -o FORMAT          table (default) or json (protojson; one message per line for watch)
  --timeout D        deadline of each call, with a unit (default 10s; watch has none)
  --tenant NAME      operator tokens only: read this tenant (list, get, watch)
`

// globals are the flags every command takes.
type globals struct {
	server    string
	token     string
	tokenFile string
	output    string
	timeout   time.Duration
	tenant    string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.server, "server", g.server, "cooldownd base URL")
	fs.StringVar(&g.token, "token", g.token, "bearer token (prefer COOLDOWNCTL_TOKEN or --token-file)")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "file holding the bearer token")
	fs.StringVar(&g.output, "o", g.output, "output format: table or json")
	fs.StringVar(&g.output, "output", g.output, "output format: table or json")
	fs.Var((*durationFlag)(&g.timeout), "timeout", "deadline of each call")
	fs.StringVar(&g.tenant, "tenant", g.tenant, "operator tokens only: the tenant to read")
}

// durationFlag is a flag.Value for durations whose error says that a unit
// is needed when one is missing ("10" is not 10 seconds or 10 minutes).
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("%q has no unit: write it with one, such as %ss or %sm", s, s, s)
		}
		return fmt.Errorf("%q is not a duration such as 90s, 10m or 1h30m", s)
	}
	*d = durationFlag(v)
	return nil
}

// env is one invocation: its output streams and API clients.
type env struct {
	g      globals
	stdout io.Writer
	stderr io.Writer
	api    cooldownv1connect.CooldownServiceClient
	admin  cooldownv1connect.AdminServiceClient
	getenv func(string) string
}

// run runs cooldownctl with args (without the program name). It is main
// without the process: tests call it with their own streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := &env{stdout: stdout, stderr: stderr, getenv: getenv}
	e.g = globals{server: "http://127.0.0.1:8080", output: "table", timeout: 10 * time.Second, tokenFile: getenv("COOLDOWNCTL_TOKEN_FILE")}
	if s := getenv("COOLDOWNCTL_SERVER"); s != "" {
		e.g.server = s
	}
	fs := flag.NewFlagSet("cooldownctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.g.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return flag.ErrHelp
		}
		return usagef("%v", err)
	}
	if fs.NArg() == 0 {
		return usagef("a command is required: list, get, watch, reset, force or version")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version":
		if len(rest) > 0 {
			return usagef("version takes no arguments")
		}
		fmt.Fprintf(stdout, "cooldownctl %s\n", buildinfo.Get())
		return nil
	}
	commands := map[string]func(context.Context, *env, []string) error{
		"list": cmdList, "get": cmdGet, "watch": cmdWatch, "reset": cmdReset, "force": cmdForce,
	}
	f, ok := commands[cmd]
	if !ok {
		return usagef("unknown command %q (want list, get, watch, reset, force or version)", cmd)
	}
	return f(ctx, e, rest)
}

// parse parses a command's flags, which may come before, between or after
// its positional arguments, together with the global flags. It sets up
// the API clients once the flags are known.
func (e *env) parse(name string, fs *flag.FlagSet, args []string) ([]string, error) {
	fs.Init(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.g.register(fs)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(e.stdout, usage)
				return nil, flag.ErrHelp
			}
			return nil, usagef("%s: %v", name, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if e.g.output != "table" && e.g.output != "json" {
		return nil, usagef("-o must be table or json, got %q", e.g.output)
	}
	if e.g.tenant != "" && (name == "reset" || name == "force") {
		return nil, usagef("%s acts in your token's tenant: --tenant is for reading with an operator token", name)
	}
	if err := e.connect(); err != nil {
		return nil, err
	}
	return pos, nil
}

// connect builds the API clients from the global flags.
func (e *env) connect() error {
	u, err := url.Parse(e.g.server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--server must be an http:// or https:// URL, got %q", e.g.server)
	}
	if u.User != nil {
		return usagef("--server must not carry credentials; use COOLDOWNCTL_TOKEN")
	}
	tok, err := e.token()
	if err != nil {
		return err
	}
	if tok != "" && u.Scheme == "http" && !isLoopback(u.Hostname()) {
		fmt.Fprintf(e.stderr, "cooldownctl: warning: sending a bearer token over plain http to %s; use https\n", u.Host)
	}
	hc := &http.Client{Transport: bearerTransport{base: http.DefaultTransport, token: tok}}
	base := strings.TrimSuffix(u.String(), "/")
	e.api = cooldownv1connect.NewCooldownServiceClient(hc, base)
	e.admin = cooldownv1connect.NewAdminServiceClient(hc, base)
	return nil
}

// token resolves the bearer token: --token, then --token-file (or
// COOLDOWNCTL_TOKEN_FILE), then COOLDOWNCTL_TOKEN. Empty means none.
func (e *env) token() (string, error) {
	if e.g.token != "" {
		fmt.Fprintln(e.stderr, "cooldownctl: warning: --token is visible to other users of this machine; prefer COOLDOWNCTL_TOKEN or --token-file")
		return e.g.token, nil
	}
	if e.g.tokenFile != "" {
		b, err := os.ReadFile(e.g.tokenFile)
		if err != nil {
			return "", fmt.Errorf("read the token file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" || strings.ContainsAny(tok, "\r\n") {
			return "", fmt.Errorf("the token file %s must hold one token", e.g.tokenFile)
		}
		return tok, nil
	}
	return strings.TrimSpace(e.getenv("COOLDOWNCTL_TOKEN")), nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// bearerTransport adds the token to every request. The token is never
// logged or printed.
type bearerTransport struct {
	base  http.RoundTripper
	token string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("User-Agent", "cooldownctl")
	if t.token != "" {
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	return t.base.RoundTrip(r)
}

// callCtx bounds one unary call.
func (e *env) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if e.g.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, e.g.timeout)
}

// explain turns an RPC error into an operator-facing one.
func explain(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg := ce.Code().String() + ": " + ce.Message()
	switch ce.Code() {
	case connect.CodeUnauthenticated:
		msg += " (set COOLDOWNCTL_TOKEN or --token-file)"
	case connect.CodePermissionDenied:
		// The server names the roles the call needs; an older one did not.
		if !strings.Contains(ce.Message(), "needs") {
			msg += " (list, get and watch need a viewer, admin or operator token; reset and force an admin token)"
		}
	case connect.CodeUnavailable:
		if strings.Contains(ce.Message(), "connect:") || strings.Contains(ce.Message(), "dial") {
			msg += " (is cooldownd running at --server?)"
		}
	}
	return errors.New(msg)
}
