// Package history records the RPCs of a chaos run and checks them: the
// fleet-wide safety properties over the whole run, and each connection's
// history for linearizability against the internal/breaker model with
// github.com/anishathalye/porcupine.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Kind is the RPC an Op records.
type Kind string

// The recorded RPCs.
const (
	Admit  Kind = "admit"
	Report Kind = "report"
	Extend Kind = "extend"
	Get    Kind = "get"
)

// Op is one RPC as a client process saw it. Times are Unix milliseconds of
// the machine clock, which the server's Redis TIME shares (one machine).
type Op struct {
	Process int    `json:"p"`
	ID      int64  `json:"id"` // per process; a later line of the same op replaces an earlier one
	Kind    Kind   `json:"k"`
	Conn    string `json:"c"` // connection id, hex
	Call    int64  `json:"call"`
	Return  int64  `json:"ret"`

	// Request.
	Revision   uint64 `json:"rev,omitempty"`
	LeaseToken string `json:"tok,omitempty"`
	Outcome    int    `json:"out,omitempty"`
	RetryAfter int64  `json:"ra,omitempty"`  // ms
	TTL        int64  `json:"ttl,omitempty"` // ms, extend
	// Report only: the successes it stands for (0: one), its retry flag,
	// reporter and idempotency key. Each entry of a ReportBatch is a
	// Report op of its own, numbered from 1 in Entry, with the batch's
	// call and return times and reporter, keyed <batch key>-<index> as the
	// server keys it.
	Count    int64  `json:"n,omitempty"`
	Retry    bool   `json:"retry,omitempty"`
	Reporter string `json:"who,omitempty"`
	Key      string `json:"key,omitempty"`
	Entry    int    `json:"entry,omitempty"` // 0: not in a batch

	// Answer. Code is "" on success, a Connect code name on an error, and
	// "lost" when no answer arrived (the op may or may not have happened).
	Code string `json:"code,omitempty"`
	Res  Result `json:"res"`
}

// Result is what the server answered.
type Result struct {
	ServerTime int64  `json:"now,omitempty"` // ms; Admit, Report, and Extend (derived)
	Decision   int    `json:"dec,omitempty"`
	Reason     int    `json:"why,omitempty"`
	RetryAfter int64  `json:"ra,omitempty"` // ms
	AvailAt    int64  `json:"avail,omitempty"`
	Revision   uint64 `json:"rev,omitempty"`
	Phase      int    `json:"ph,omitempty"`
	LeaseToken string `json:"tok,omitempty"`
	LeaseExp   int64  `json:"lexp,omitempty"`
	Accepted   bool   `json:"acc,omitempty"`
	Changed    bool   `json:"chg,omitempty"`
	// Report and Admit: durability NOT_REPLICATED (applied on the master,
	// which a failover may yet lose: possibly applied and possibly not).
	NotReplicated bool `json:"nrep,omitempty"`
	// Get only: the stored state.
	Cause       int   `json:"cause,omitempty"`
	OpenUntil   int64 `json:"until,omitempty"`
	Reopens     int   `json:"reopens,omitempty"`
	Consecutive int   `json:"cf,omitempty"`
	Probes      int   `json:"probes,omitempty"`
	Override    int   `json:"ov,omitempty"`
}

// Lost reports whether no answer arrived.
func (o Op) Lost() bool { return o.Code == "lost" }

// OK reports whether the server answered without an error.
func (o Op) OK() bool { return o.Code == "" }

// FirstOfRPC reports whether o is the first op of its RPC: every op but a
// ReportBatch's entries after its first.
func (o Op) FirstOfRPC() bool { return o.Entry <= 1 }

func (o Op) String() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// Writer appends ops to a JSON-lines file. It is not safe for concurrent
// use; the worker serialises writes.
type Writer struct {
	w *bufio.Writer
	f *os.File
}

// Create opens path for writing.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &Writer{w: bufio.NewWriterSize(f, 64<<10), f: f}, nil
}

// Write appends one op.
func (w *Writer) Write(o Op) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.w.Write(b)
	return err
}

// Flush writes what is buffered to the file.
func (w *Writer) Flush() error { return w.w.Flush() }

// Close flushes and closes the file.
func (w *Writer) Close() error {
	err := w.w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Read reads every *.jsonl file of dir. A process killed mid-write leaves
// a truncated last line: it is skipped.
func Read(dir string) ([]Op, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var ops []Op
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		ops, err = readOps(f, ops)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return ops, nil
}

// readOps appends the ops of one file: each op is written when sent (as
// lost) and again when answered; the last line of an op wins.
func readOps(r io.Reader, ops []Op) ([]Op, error) {
	at := map[[2]int64]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var o Op
		if json.Unmarshal([]byte(line), &o) != nil {
			continue // the truncated last line of a killed process
		}
		k := [2]int64{int64(o.Process), o.ID}
		if i, ok := at[k]; ok && o.ID != 0 {
			ops[i] = o
			continue
		}
		at[k] = len(ops)
		ops = append(ops, o)
	}
	return ops, sc.Err()
}
