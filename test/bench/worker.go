package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/cooldownd/cooldownd/api/v1/gen/cooldownv1/cooldownv1connect"
	"github.com/cooldownd/cooldownd/internal/proctest"
)

// A client process of the cluster run is this binary run as
// `bench -worker -worker-url U -connections N`: one HTTP/2 connection to
// replica U, goroutinesPerClient goroutines. It reads one phase per line on
// stdin ("<id> <start unix ns> <duration ns>"), measures from the start for
// the duration, and writes one workerResult per phase as a JSON line.

type workerResult struct {
	N    int64   `json:"n"`
	Errs int64   `json:"errs"`
	Err  string  `json:"err,omitempty"`
	Lat  []int64 `json:"lat"` // ns, sorted
}

func runWorker(url string, nconns int) error {
	cl := cooldownv1connect.NewCooldownServiceClient(h2c(), url)
	ops := clusterOps(func(int) cooldownv1connect.CooldownServiceClient { return cl }, clusterConns(nconns))
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var id string
		var start, d int64
		if _, err := fmt.Sscan(in.Text(), &id, &start, &d); err != nil {
			return fmt.Errorf("worker: bad command %q", in.Text())
		}
		f, ok := ops[id]
		if !ok {
			return fmt.Errorf("worker: unknown phase %q", id)
		}
		s := drive(ctx, goroutinesPerClient, time.Until(time.Unix(0, start)), time.Duration(d), f, func() {}, func() {})
		r := workerResult{N: s.n, Errs: s.errs, Lat: make([]int64, len(s.lat))}
		for i, l := range s.lat {
			r.Lat[i] = int64(l)
		}
		if s.err != nil {
			r.Err = s.err.Error()
		}
		if err := out.Encode(r); err != nil {
			return err
		}
	}
	return in.Err()
}

// workerPool is the cluster run's client processes.
type workerPool struct {
	in  []io.Writer
	out []*json.Decoder
}

func startWorkers(ps *proctest.Group, urls []string, nconns int) (*workerPool, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	wp := &workerPool{}
	for i, u := range urls {
		p, err := ps.StartPiped(fmt.Sprintf("client-%d", i), exec.Command(exe, "-worker", "-worker-url", u, "-connections", fmt.Sprint(nconns)))
		if err != nil {
			return nil, err
		}
		wp.in = append(wp.in, p.Stdin)
		wp.out = append(wp.out, json.NewDecoder(p.Stdout))
	}
	return wp, nil
}

// run has every process measure phase id over the same window, warm from
// now, d long; start and end run as the window opens and closes.
func (wp *workerPool) run(id string, warm, d time.Duration, start, end func()) (sample, error) {
	t0 := time.Now().Add(warm + 100*time.Millisecond)
	for _, in := range wp.in {
		if _, err := fmt.Fprintf(in, "%s %d %d\n", id, t0.UnixNano(), int64(d)); err != nil {
			return sample{}, fmt.Errorf("client process: %w", err)
		}
	}
	time.Sleep(time.Until(t0))
	start()
	time.Sleep(time.Until(t0.Add(d)))
	end()
	s := sample{dur: d}
	for _, dec := range wp.out {
		var r workerResult
		if err := dec.Decode(&r); err != nil {
			return sample{}, fmt.Errorf("client process result: %w", err)
		}
		s.n += r.N
		s.errs += r.Errs
		if r.Err != "" && s.err == nil {
			s.err = errors.New(r.Err)
		}
		for _, l := range r.Lat {
			s.lat = append(s.lat, time.Duration(l))
		}
	}
	slices.Sort(s.lat)
	return s, nil
}
