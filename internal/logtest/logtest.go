// Package logtest holds test helpers for capturing logs written from many
// goroutines (slog handlers, servers under test) and reading JSON records
// back.
package logtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Buffer is a goroutine-safe bytes.Buffer for log output. The zero value is
// ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len returns how many bytes were written.
func (s *Buffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// Record is one JSON log line (slog's JSON handler): "time", "level",
// "msg" and the attributes, groups as nested maps.
type Record map[string]any

// Str returns the string at a dotted path ("policy.open_base"), "" when
// missing or not a string.
func (r Record) Str(path string) string {
	s, _ := r.Get(path).(string)
	return s
}

// Get returns the value at a dotted path, nil when missing.
func (r Record) Get(path string) any {
	var cur any = map[string]any(r)
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// Records parses every line written so far as a JSON record. It fails on
// the first line that is not one, so a test can also assert that every
// line is structured.
func (s *Buffer) Records() ([]Record, error) {
	var out []Record
	for i, line := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return out, fmt.Errorf("logtest: line %d is not a JSON record: %q", i+1, line)
		}
		out = append(out, r)
	}
	return out, nil
}

// Find returns the JSON records whose msg is msg (lines that are not JSON
// are skipped).
func (s *Buffer) Find(msg string) []Record {
	var out []Record
	for _, line := range strings.Split(s.String(), "\n") {
		var r Record
		if json.Unmarshal([]byte(line), &r) == nil && r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}
