package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	cooldownv1 "github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1"
)

// listPageSize is the page size list asks for (the server's maximum).
const listPageSize = 500

func cmdList(ctx context.Context, e *env, args []string) error {
	var fs flag.FlagSet
	state := fs.String("state", "", "only connections in this state: closed, open or half-open")
	limit := fs.Int("limit", 0, "list at most this many connections (0: all)")
	order := fs.String("sort", "severity", "order: severity (open first, longest left first) or id")
	pos, err := e.parse("list", &fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("list takes no arguments, got %q", pos)
	}
	want := cooldownv1.State_STATE_UNSPECIFIED
	if *state != "" {
		if want = parseState(*state); want == cooldownv1.State_STATE_UNSPECIFIED {
			return usagef("--state must be closed, open or half-open, got %q", *state)
		}
	}
	if *order != "severity" && *order != "id" {
		return usagef("--sort must be severity or id, got %q", *order)
	}
	all, err := e.listAll(ctx)
	if err != nil {
		return err
	}
	if *order == "severity" {
		sortBySeverity(all)
	}
	var conns []*cooldownv1.ConnectionState
	for _, c := range all {
		if want == cooldownv1.State_STATE_UNSPECIFIED || c.GetState() == want {
			conns = append(conns, c)
		}
	}
	if *limit > 0 && len(conns) > *limit {
		conns = conns[:*limit]
	}
	if e.g.output == "json" {
		return e.printJSON(&cooldownv1.ListConnectionsResponse{Connections: conns})
	}
	if len(conns) == 0 {
		fmt.Fprintln(e.stdout, "No connections.")
		return nil
	}
	tenants := slices.ContainsFunc(conns, func(c *cooldownv1.ConnectionState) bool { return c.GetTenant() != "" })
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	if tenants {
		fmt.Fprint(tw, "TENANT\t")
	}
	fmt.Fprintln(tw, "ID\tLABEL\tSTATE\tCAUSE\tLEFT\tPROBES\tOK/FAIL\tLAST\tREV\tCHANGED\tWHY")
	now := time.Now()
	for _, c := range conns {
		if tenants {
			fmt.Fprintf(tw, "%s\t", c.GetTenant())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%d\t%s\t%s\n",
			shortID(c.GetConnection().GetId()), orDash(c.GetConnection().GetLabel()), stateText(c), openCause(c), left(c, now),
			probes(c, now), c.GetRecentSuccesses(), c.GetRecentFailures(), lastReport(c), c.GetRevision(), ago(c.GetChangedAt(), now),
			orDash(strings.Join(c.GetExplanation().GetReasons(), "; ")))
	}
	return tw.Flush()
}

func cmdGet(ctx context.Context, e *env, args []string) error {
	var fs flag.FlagSet
	history := fs.Uint("history", 20, "recent transitions to show (at most 50)")
	pos, err := e.parse("get", &fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("get takes one connection id")
	}
	if *history > 50 {
		return usagef("--history must be at most 50")
	}
	tg, err := e.resolveID(ctx, pos[0])
	if err != nil {
		return err
	}
	res, err := e.get(ctx, tg, uint32(*history))
	if err != nil {
		return err
	}
	if e.g.output == "json" {
		return e.printJSON(res)
	}
	e.printState(res.GetConnection(), res.GetPolicy())
	if p := res.GetPolicy(); p != nil {
		e.printPolicy(p)
	}
	if *history == 0 {
		return nil
	}
	fmt.Fprintln(e.stdout)
	if len(res.GetHistory()) == 0 {
		fmt.Fprintln(e.stdout, "No transitions recorded.")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tFROM\tTO\tCAUSE\tREV\tACTOR\tREASON")
	for _, t := range res.GetHistory() {
		cause := orDash(enumText(t.GetCause().String(), "CAUSE_"))
		if t.GetShadow() {
			cause += " [shadow]"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", stamp(t.GetTime()), stateName(t.GetFrom()),
			stateName(t.GetTo()), cause, t.GetRevision(),
			orDash(t.GetActor()), orDash(t.GetReason()))
	}
	return tw.Flush()
}

func cmdWatch(ctx context.Context, e *env, args []string) error {
	var fs flag.FlagSet
	snapshot := fs.Bool("snapshot", true, "print every current connection first")
	pos, err := e.parse("watch", &fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("watch takes no arguments, got %q", pos)
	}
	backoff := time.Second
	for {
		started := time.Now()
		stream, err := e.api.WatchConnections(ctx, connect.NewRequest(&cooldownv1.WatchConnectionsRequest{Snapshot: *snapshot, Tenant: e.g.tenant}))
		if err == nil {
			marked := false
			for stream.Receive() {
				if stream.Msg().GetConnection() == nil && !marked {
					// The first empty message ends the snapshot.
					marked = true
					if *snapshot && e.g.output == "table" {
						fmt.Fprintln(e.stderr, "cooldownctl: watch: snapshot complete; following changes")
					}
				}
				if err := e.printEvent(stream.Msg()); err != nil {
					_ = stream.Close()
					return err
				}
			}
			err = stream.Err()
			_ = stream.Close()
		}
		if ctx.Err() != nil {
			return nil // Ctrl-C
		}
		switch connect.CodeOf(err) {
		case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeInvalidArgument, connect.CodeUnimplemented:
			return explain(err)
		}
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		reason := "the server ended the stream"
		if err != nil {
			reason = explain(err).Error()
		}
		fmt.Fprintf(e.stderr, "cooldownctl: watch: %s; reconnecting in %v\n", reason, backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// printEvent prints one watch message; heartbeats (empty messages) print
// nothing.
func (e *env) printEvent(m *cooldownv1.WatchConnectionsResponse) error {
	c := m.GetConnection()
	if c == nil {
		return nil
	}
	if e.g.output == "json" {
		b, err := protojson.Marshal(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", hexIDs(b))
		return err
	}
	label := orDash(c.GetConnection().GetLabel())
	if tn := c.GetTenant(); tn != "" {
		label = tn + " " + label
	}
	if t := m.GetTransition(); t != nil {
		line := fmt.Sprintf("%-24s  %-8s  %-28s  %-9s → %-9s  %-13s  rev %d", stamp(t.GetTime()), shortID(c.GetConnection().GetId()), label,
			stateName(t.GetFrom()), stateName(t.GetTo()), orDash(enumText(t.GetCause().String(), "CAUSE_")), t.GetRevision())
		if t.GetShadow() {
			line += "  [shadow: not enforced]"
		}
		if t.GetActor() != "" || t.GetReason() != "" {
			line += "  " + strings.TrimPrefix(t.GetActor()+": "+t.GetReason(), ": ")
		}
		_, err := fmt.Fprintln(e.stdout, strings.TrimRight(line, " "))
		return err
	}
	_, err := fmt.Fprintf(e.stdout, "%-24s  %-8s  %-28s  %-21s  %-13s  rev %d\n", "snapshot", shortID(c.GetConnection().GetId()), label,
		stateText(c), openCause(c), c.GetRevision())
	return err
}

func cmdReset(ctx context.Context, e *env, args []string) error {
	var fs flag.FlagSet
	reason := fs.String("reason", "", "why, for the audit trail (required)")
	pos, err := e.parse("reset", &fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("reset takes one connection id")
	}
	if strings.TrimSpace(*reason) == "" {
		return usagef("reset needs --reason (it goes in the audit trail)")
	}
	tg, err := e.resolveID(ctx, pos[0])
	if err != nil {
		return err
	}
	if _, err := e.get(ctx, tg, 0); err != nil {
		return err
	}
	cctx, cancel := e.callCtx(ctx)
	defer cancel()
	res, err := e.admin.ResetConnection(cctx, connect.NewRequest(&cooldownv1.ResetConnectionRequest{Id: tg.id, Reason: *reason}))
	if err != nil {
		return explain(err)
	}
	if e.g.output == "json" {
		return e.printJSON(res.Msg)
	}
	c := res.Msg.GetConnection()
	fmt.Fprintf(e.stdout, "Reset %s: now %s, revision %d.\n", name(c), stateText(c), c.GetRevision())
	return nil
}

func cmdForce(ctx context.Context, e *env, args []string) error {
	var fs flag.FlagSet
	reason := fs.String("reason", "", "why, for the audit trail (required)")
	var forD time.Duration
	dur := &forD
	fs.Var((*durationFlag)(dur), "for", "how long the override lasts, with a unit such as 10m (0: until changed or cleared)")
	pos, err := e.parse("force", &fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("force takes a connection id and open, closed or clear")
	}
	var o cooldownv1.Override
	switch pos[1] {
	case "open":
		o = cooldownv1.Override_OVERRIDE_FORCED_OPEN
	case "closed", "close":
		o = cooldownv1.Override_OVERRIDE_FORCED_CLOSED
	case "clear":
		o = cooldownv1.Override_OVERRIDE_UNSPECIFIED
		if *dur != 0 {
			return usagef("--for makes no sense with clear")
		}
	default:
		return usagef("force wants open, closed or clear, got %q", pos[1])
	}
	if *dur < 0 {
		return usagef("--for must not be negative")
	}
	if strings.TrimSpace(*reason) == "" {
		return usagef("force needs --reason (it goes in the audit trail)")
	}
	tg, err := e.resolveID(ctx, pos[0])
	if err != nil {
		return err
	}
	// Forcing an id cooldownd does not know would create it: a typo must
	// not force a connection nobody uses.
	before, err := e.get(ctx, tg, 0)
	if err != nil {
		return err
	}
	req := &cooldownv1.ForceConnectionRequest{Id: tg.id, Override: o, Reason: *reason}
	if *dur > 0 {
		req.Duration = durationpb.New(*dur)
	}
	cctx, cancel := e.callCtx(ctx)
	defer cancel()
	res, err := e.admin.ForceConnection(cctx, connect.NewRequest(req))
	if err != nil {
		return explain(err)
	}
	if e.g.output == "json" {
		return e.printJSON(res.Msg)
	}
	c := res.Msg.GetConnection()
	switch {
	case o == cooldownv1.Override_OVERRIDE_UNSPECIFIED && before.GetConnection().GetOverride() == cooldownv1.Override_OVERRIDE_UNSPECIFIED &&
		c.GetRevision() == before.GetConnection().GetRevision():
		hint := ""
		if c.GetState() == cooldownv1.State_STATE_OPEN || c.GetState() == cooldownv1.State_STATE_HALF_OPEN {
			hint = " To close it, reset it."
		}
		fmt.Fprintf(e.stdout, "%s has no override: nothing to clear (now %s, revision %d).%s\n", name(c), stateText(c), c.GetRevision(), hint)
	case o == cooldownv1.Override_OVERRIDE_UNSPECIFIED:
		fmt.Fprintf(e.stdout, "Cleared the override of %s: now %s, revision %d.\n", name(c), stateText(c), c.GetRevision())
	case *dur > 0:
		fmt.Fprintf(e.stdout, "Forced %s %s for %s (until %s), revision %d.\n", name(c), pos[1], human(*dur), stamp(c.GetOverrideUntil()), c.GetRevision())
	default:
		fmt.Fprintf(e.stdout, "Forced %s %s until changed, revision %d.\n", name(c), pos[1], c.GetRevision())
	}
	return nil
}

// listAll pages through the connections the token may read (an operator's:
// every tenant's, or --tenant's).
func (e *env) listAll(ctx context.Context) ([]*cooldownv1.ConnectionState, error) {
	var out []*cooldownv1.ConnectionState
	tok := ""
	for {
		cctx, cancel := e.callCtx(ctx)
		res, err := e.api.ListConnections(cctx, connect.NewRequest(&cooldownv1.ListConnectionsRequest{PageSize: listPageSize, PageToken: tok, Tenant: e.g.tenant}))
		cancel()
		if err != nil {
			return nil, explain(err)
		}
		out = append(out, res.Msg.GetConnections()...)
		if tok = res.Msg.GetNextPageToken(); tok == "" {
			return out, nil
		}
	}
}

// target is a connection named on the command line: its id and, for an
// operator, its tenant.
type target struct {
	id     []byte
	tenant string
}

// get reads one connection; one cooldownd holds no state of is an error
// (exit 1), never an empty closed connection.
func (e *env) get(ctx context.Context, tg target, history uint32) (*cooldownv1.GetConnectionResponse, error) {
	cctx, cancel := e.callCtx(ctx)
	defer cancel()
	res, err := e.api.GetConnection(cctx, connect.NewRequest(&cooldownv1.GetConnectionRequest{Id: tg.id, Tenant: tg.tenant, HistoryLimit: history}))
	if err != nil {
		return nil, explain(err)
	}
	if !res.Msg.GetFound() {
		where := ""
		if tg.tenant != "" {
			where = " in tenant " + tg.tenant
		}
		return nil, fmt.Errorf("connection %x not found%s: cooldownd holds no state for it (a mistyped id, or one idle longer than the server's --idle-ttl)", tg.id, where)
	}
	return res.Msg, nil
}

// resolveID turns a full id (64 hex digits or base64) or a unique prefix
// of at least 4 hex digits into a connection.
func (e *env) resolveID(ctx context.Context, arg string) (target, error) {
	s := strings.TrimSuffix(strings.TrimSpace(arg), "…")
	if id, ok := parseFullID(s); ok {
		return target{id: id, tenant: e.g.tenant}, nil
	}
	s = strings.ToLower(s)
	if len(s) < 4 || len(s) > 64 || strings.Trim(s, "0123456789abcdef") != "" {
		return target{}, usagef("%q is not a connection id: give its 64 hex digits, its base64, or a unique prefix of at least 4 hex digits", arg)
	}
	all, err := e.listAll(ctx)
	if err != nil {
		return target{}, err
	}
	var found []target
	for _, c := range all {
		id := c.GetConnection().GetId()
		if strings.HasPrefix(hex.EncodeToString(id), s) {
			found = append(found, target{id: id, tenant: c.GetTenant()})
		}
	}
	switch len(found) {
	case 0:
		return target{}, fmt.Errorf("no connection id starts with %s", s)
	case 1:
		return found[0], nil
	}
	return target{}, fmt.Errorf("%d connection ids start with %s; give more digits", len(found), s)
}

// parseFullID reads 64 hex digits, or the base64 (standard or URL-safe,
// padded or not) of 32 bytes.
func parseFullID(s string) ([]byte, bool) {
	const idLen = 32
	if len(s) == 2*idLen {
		b, err := hex.DecodeString(strings.ToLower(s))
		return b, err == nil
	}
	if strings.Trim(strings.ToLower(s), "0123456789abcdef") == "" {
		return nil, false // a hex prefix
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == idLen {
			return b, true
		}
	}
	return nil, false
}

// severity ranks a connection for list: the server's rank
// (Explanation.severity: open ones first, forced open among them, then
// half-open, forced closed, denied by a fleet rule, failing, healthy); a
// state without an explanation (an older server) last.
func severity(c *cooldownv1.ConnectionState) uint32 {
	if x := c.GetExplanation(); x != nil {
		return x.GetSeverity()
	}
	return math.MaxUint32
}

// sortBySeverity orders conns by severity, then time left (longest
// first), then failures (most first), then tenant and id.
func sortBySeverity(conns []*cooldownv1.ConnectionState) {
	slices.SortStableFunc(conns, func(a, b *cooldownv1.ConnectionState) int {
		return cmp.Or(
			cmp.Compare(severity(a), severity(b)),
			cmp.Compare(b.GetRetryAfter().AsDuration(), a.GetRetryAfter().AsDuration()),
			cmp.Compare(b.GetRecentFailures(), a.GetRecentFailures()),
			cmp.Compare(a.GetTenant(), b.GetTenant()),
			bytes.Compare(a.GetConnection().GetId(), b.GetConnection().GetId()),
		)
	})
}

// jsonID matches protojson's rendering of a connection id (base64 of 32
// bytes: 44 characters), which printJSON rewrites as hex.
var jsonID = regexp.MustCompile(`"id":\s*"([A-Za-z0-9+/]{43}=)"`)

// printJSON prints m as protojson, except that connection ids are hex, as
// in the tables (protojson writes bytes as base64).
func (e *env) printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", hexIDs(b))
	return err
}

func hexIDs(b []byte) []byte {
	return jsonID.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := jsonID.FindSubmatch(m)
		raw, err := base64.StdEncoding.DecodeString(string(sub[1]))
		if err != nil || len(raw) != 32 {
			return m
		}
		return []byte(`"id": "` + hex.EncodeToString(raw) + `"`)
	})
}

// printState prints one connection's state as aligned fields; p, its
// effective policy (nil if unknown), explains the fleet counts.
func (e *env) printState(c *cooldownv1.ConnectionState, p *cooldownv1.Policy) {
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ID", hex.EncodeToString(c.GetConnection().GetId()))
	if t := c.GetTenant(); t != "" {
		row("Tenant", t)
	}
	row("Label", orDash(c.GetConnection().GetLabel()))
	st := stateText(c)
	if cause := enumText(c.GetCause().String(), "CAUSE_"); cause != "" {
		if c.GetState() == cooldownv1.State_STATE_OPEN {
			st += " (" + cause + ")"
		} else {
			st += " (last cause: " + cause + ")"
		}
	}
	row("State", st)
	for i, why := range c.GetExplanation().GetReasons() {
		k := ""
		if i == 0 {
			k = "Why"
		}
		row(k, why)
	}
	if c.GetShadow() {
		row("Shadow", shadowText(c))
	}
	switch {
	case c.GetState() == cooldownv1.State_STATE_OPEN && c.GetOpenUntil() != nil:
		row("Left", left(c, now)+untilText(c.GetOpenUntil()))
	case c.GetState() == cooldownv1.State_STATE_OPEN || c.GetOverrideUntil() != nil:
		row("Left", left(c, now)+untilText(c.GetOverrideUntil()))
	}
	row("Revision", fmt.Sprint(c.GetRevision()))
	row("Probes", probes(c, now))
	row("Since last change", fmt.Sprintf("%d successes, %d failures (%d consecutive), %d re-opens",
		c.GetRecentSuccesses(), c.GetRecentFailures(), c.GetConsecutiveFailures(), c.GetReopens()))
	last := lastReport(c)
	if code := c.GetLastErrorCode(); code != "" {
		last += " " + code
	}
	if c.GetUpdatedAt() != nil {
		last += " at " + stamp(c.GetUpdatedAt())
	}
	row("Last report", last)
	ov := "none"
	if c.GetOverride() != cooldownv1.Override_OVERRIDE_UNSPECIFIED {
		ov = enumText(c.GetOverride().String(), "OVERRIDE_")
		if c.GetOverrideUntil() != nil {
			ov += untilText(c.GetOverrideUntil())
		} else {
			ov += " until changed"
		}
	}
	row("Override", ov)
	ch := "-"
	if c.GetChangedAt() != nil {
		ch = stamp(c.GetChangedAt()) + " (" + ago(c.GetChangedAt(), now) + ")"
	}
	row("Last change", ch)
	for _, f := range fleetRows(c, p) {
		row(f[0], f[1])
	}
	_ = tw.Flush()
}

// shadowText says what a shadow policy means for this connection now.
func shadowText(c *cooldownv1.ConnectionState) string {
	const what = "its policy's decisions are computed and published, not enforced"
	switch {
	case c.GetOverride() != cooldownv1.Override_OVERRIDE_UNSPECIFIED:
		return "yes: " + what + "; the operator override is enforced"
	case c.GetState() != cooldownv1.State_STATE_CLOSED && c.GetState() != cooldownv1.State_STATE_UNSPECIFIED:
		return "yes: this state is not enforced, calls are allowed (" + what + ")"
	}
	return "yes: " + what
}

// reasonText is a deny reason as the API names it: retry_budget,
// throttled.
func reasonText(r cooldownv1.DenyReason) string { return enumText(r.String(), "DENY_REASON_") }

// fleetRows are the fleet counts of c (ConnectionState.fleet) as rows,
// none when every count is zero, with what the server's explanation says
// of each fleet rule (the throttle, the retry budget, the trip quorum);
// its policy p names the window.
func fleetRows(c *cooldownv1.ConnectionState, p *cooldownv1.Policy) [][2]string {
	f := c.GetFleet()
	if f.GetFirstAttempts() == 0 && f.GetRetries() == 0 && f.GetRequests() == 0 && f.GetAccepts() == 0 &&
		f.GetThrottleProbability() == 0 && f.GetFailureReporters() == 0 {
		return nil
	}
	over := ""
	if w := p.GetFleetWindow().AsDuration(); p.GetFleetWindow() != nil && w > 0 {
		over = " over " + durationText(w)
	}
	enforced := " are denied"
	if c.GetShadow() {
		enforced = " would be denied (shadow: not enforced)"
	}
	rows := [][2]string{{"Fleet" + over, fmt.Sprintf("%s first attempts, %s retries, %s requests, %s accepts",
		count(f.GetFirstAttempts()), count(f.GetRetries()), count(f.GetRequests()), count(f.GetAccepts()))}}
	x := c.GetExplanation()
	if pr := x.GetThrottleProbability(); pr > 0 {
		v := fmt.Sprintf("%s of calls%s (%s)", percent(pr), enforced, reasonText(cooldownv1.DenyReason_DENY_REASON_THROTTLED))
		if !x.GetThrottling() {
			v = fmt.Sprintf("%s of calls once closed (%s; the throttle applies only while closed)", percent(pr), reasonText(cooldownv1.DenyReason_DENY_REASON_THROTTLED))
		}
		rows = append(rows, [2]string{"Throttle", v})
	}
	if b := x.GetRetryBudget(); b != nil {
		v := fmt.Sprintf("%s of %s retries used, %d left", count(b.GetRetries()), count(b.GetAllowed()), b.GetRetriesLeft())
		if b.GetRetriesLeft() == 0 {
			v = fmt.Sprintf("spent (%s of %s retries): further retries%s (%s) and should fall back",
				count(b.GetRetries()), count(b.GetAllowed()), enforced, reasonText(cooldownv1.DenyReason_DENY_REASON_RETRY_BUDGET))
		}
		rows = append(rows, [2]string{"Retry budget", v})
	}
	if n, q := f.GetFailureReporters(), x.GetQuorumNeeded(); n > 0 || q > 0 {
		v := fmt.Sprint(n)
		if q > 0 {
			v = fmt.Sprintf("%d of the %d that transient failures need to trip (trip quorum)", x.GetQuorumReporters(), q)
		}
		rows = append(rows, [2]string{"Failure reporters", v})
	}
	return rows
}

// count writes a fleet count (weighted: the older bucket by its overlap)
// with at most one decimal: 12, 12.5.
func count(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// percent writes a probability as a percentage with at most one decimal.
func percent(v float64) string { return strconv.FormatFloat(math.Round(v*1000)/10, 'f', -1, 64) + "%" }

// ---- formatting --------------------------------------------------------

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stateName is a state as the flags, the dashboard and the docs name it:
// closed, open, half-open; UNSPECIFIED is "".
func stateName(s cooldownv1.State) string {
	return strings.ReplaceAll(enumText(s.String(), "STATE_"), "_", "-")
}

// enumText turns CAUSE_RATE_LIMIT into rate_limit; UNSPECIFIED is "".
func enumText(s, prefix string) string {
	s = strings.ToLower(strings.TrimPrefix(s, prefix))
	if s == "unspecified" {
		return ""
	}
	return s
}

func parseState(s string) cooldownv1.State {
	switch strings.ReplaceAll(strings.ToLower(s), "-", "_") {
	case "closed":
		return cooldownv1.State_STATE_CLOSED
	case "open":
		return cooldownv1.State_STATE_OPEN
	case "half_open", "halfopen":
		return cooldownv1.State_STATE_HALF_OPEN
	}
	return cooldownv1.State_STATE_UNSPECIFIED
}

// shortIDLen is how many hex digits of an id the tables print: the first
// 8, the form cooldownd's logs and the dashboard use too.
const shortIDLen = 8

func shortID(id []byte) string {
	h := hex.EncodeToString(id)
	return h[:min(shortIDLen, len(h))]
}

func name(c *cooldownv1.ConnectionState) string {
	id := shortID(c.GetConnection().GetId())
	if l := c.GetConnection().GetLabel(); l != "" {
		return id + " (" + l + ")"
	}
	return id
}

func stateText(c *cooldownv1.ConnectionState) string {
	s := stateName(c.GetState())
	if s == "" {
		s = "closed"
	}
	if o := c.GetOverride(); o != cooldownv1.Override_OVERRIDE_UNSPECIFIED {
		s += " [" + enumText(o.String(), "OVERRIDE_") + "]"
	}
	if c.GetShadow() {
		s += " [shadow]"
	}
	return s
}

func openCause(c *cooldownv1.ConnectionState) string {
	if c.GetState() != cooldownv1.State_STATE_OPEN {
		return "-"
	}
	return orDash(enumText(c.GetCause().String(), "CAUSE_"))
}

// left is the time until the state changes by itself, as the dashboard
// counts it down: an open period's end as the server computed it, else a
// timed override's end ("until changed" for an untimed forced open).
func left(c *cooldownv1.ConnectionState, now time.Time) string {
	if c.GetState() == cooldownv1.State_STATE_OPEN && c.GetRetryAfter() != nil {
		return human(c.GetRetryAfter().AsDuration())
	}
	if c.GetOverride() != cooldownv1.Override_OVERRIDE_UNSPECIFIED && c.GetOverrideUntil() != nil {
		return human(c.GetOverrideUntil().AsTime().Sub(now))
	}
	if c.GetState() == cooldownv1.State_STATE_OPEN && c.GetOverride() == cooldownv1.Override_OVERRIDE_FORCED_OPEN {
		return "until changed"
	}
	return "-"
}

func probes(c *cooldownv1.ConnectionState, now time.Time) string {
	n := c.GetProbesInFlight()
	if n == 0 {
		return "0"
	}
	if t := c.GetProbeStartedAt(); t != nil {
		return fmt.Sprintf("%d (%s)", n, human(now.Sub(t.AsTime())))
	}
	return fmt.Sprint(n)
}

func lastReport(c *cooldownv1.ConnectionState) string {
	var parts []string
	if s := c.GetLastHttpStatus(); s != 0 {
		parts = append(parts, fmt.Sprint(s))
	}
	if o := enumText(c.GetLastOutcome().String(), "OUTCOME_"); o != "" {
		parts = append(parts, o)
	}
	return orDash(strings.Join(parts, " "))
}

func stamp(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().UTC().Format("2006-01-02T15:04:05.000Z")
}

func untilText(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return " (until " + stamp(t) + ")"
}

func ago(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil {
		return "-"
	}
	d := now.Sub(t.AsTime())
	if d < time.Second {
		return "just now"
	}
	return human(d) + " ago"
}

// human rounds a duration for people: 950ms, 29s, 4m10s, 2h5m.
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.Replace(d.Round(time.Second).String(), "m0s", "m", 1)
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// printPolicy prints the connection's effective policy, one rule a line.
func (e *env) printPolicy(p *cooldownv1.Policy) {
	d := func(v interface{ AsDuration() time.Duration }, off string) string {
		if x := v.AsDuration(); x > 0 {
			return durationText(x)
		}
		return off
	}
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("POLICY", "")
	trip := "off"
	if n := p.GetConsecutiveFailures(); n > 0 {
		trip = fmt.Sprintf("after %d consecutive failures", n)
	}
	row("Consecutive failures", trip)
	rate := "off"
	if r := p.GetFailureRate(); r > 0 {
		rate = fmt.Sprintf("%g%% over %s, once %d calls are seen", r*100, d(p.GetWindow(), "-"), p.GetMinCalls())
	}
	row("Failure rate", rate)
	jit := "no jitter"
	if j := p.GetJitter(); j > 0 {
		jit = fmt.Sprintf("±%g%% jitter", j*100)
	}
	row("Breaker open", fmt.Sprintf("%s doubling to %s, %s", d(p.GetOpenBase(), "-"), d(p.GetOpenMax(), "-"), jit))
	row("Rate-limit cooldown", d(p.GetRateLimitCooldown(), "off (Retry-After only)"))
	row("Overload floor", d(p.GetOverloadFloor(), "off"))
	row("Quota block", d(p.GetQuotaBlock(), "off"))
	row("Auth block", d(p.GetAuthBlock(), "off"))
	row("Probes", fmt.Sprintf("%d at a time, lease %s", p.GetMaxProbes(), d(p.GetLeaseTtl(), "-")))
	budget, budgetMin := "off", "off (no retry budget)"
	if b := p.GetRetryBudget(); b > 0 {
		budget = fmt.Sprintf("%s of the fleet's first attempts over the fleet window", percent(b))
		budgetMin = fmt.Sprintf("%d retries/s whatever the ratio", p.GetRetryBudgetMin())
	}
	row("Retry budget", budget)
	row("Retry budget min", budgetMin)
	throttle := "off"
	if k := p.GetThrottleK(); k > 0 {
		throttle = fmt.Sprintf("%g: while closed, reject with probability max(0, (requests - %g*accepts) / (requests + 1))", k, k)
	}
	row("Throttle K", throttle)
	quorum := "off (one reporter's failures trip)"
	if q := p.GetTripQuorum(); q > 1 {
		quorum = fmt.Sprintf("%d distinct reporters of transient failures within the fleet window", q)
	}
	row("Trip quorum", quorum)
	window := d(p.GetFleetWindow(), "off")
	if p.GetRetryBudget() <= 0 && p.GetThrottleK() <= 0 && p.GetTripQuorum() <= 1 && window != "off" {
		window += " (unused: no fleet rule is on)"
	}
	row("Fleet window", window)
	shadow := "off"
	if p.GetShadow() {
		shadow = "on: decisions and transitions are computed and published, not enforced (operator overrides are)"
	}
	row("Shadow", shadow)
	_ = tw.Flush()
}

// durationText is d exactly, without trailing zero units: 5m, not 5m0s.
func durationText(d time.Duration) string {
	s := d.String()
	for _, zero := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, zero) {
			s = s[:len(s)-2]
		}
	}
	return s
}
