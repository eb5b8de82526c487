package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/client"
)

// maxStdinLine bounds one JSON line read by produce --stdin.
const maxStdinLine = 8 << 20

// produced is the JSON line printed for each acknowledged message.
type produced struct {
	ID        string `json:"id"`
	Stream    string `json:"stream"`
	Partition int    `json:"partition"`
	Offset    uint64 `json:"offset"`
	Key       string `json:"key,omitempty"`
	Payload   string `json:"payload"`
}

// inputLine is a JSON line read by produce --stdin.
type inputLine struct {
	Key     string `json:"key"`
	Payload string `json:"payload"`
}

func (a *app) produceCommand() *cobra.Command {
	var messages []string
	var key string
	var count int
	var stdin bool
	cmd := &cobra.Command{
		Use:   "produce STREAM",
		Short: "Send messages to a stream",
		Long: `Send messages to a stream and print one JSON line per acknowledged message:
{"id":"…","stream":"…","partition":N,"offset":N,"key":"…","payload":"…"}

The messages are the -m values (sent -n times over), or with --stdin one JSON
line {"key": "...", "payload": "..."} per message (key optional). A message is
printed only once the cluster has it on a majority of its replicas' disks. If a
send fails, what succeeded is printed, the failure goes to stderr and the exit
status is non-zero.`,
		Example: `  fabriq produce persistent://acme/prod/orders -m hello -m world --key k1
  printf '{"key":"a","payload":"x"}\n' | fabriq produce persistent://acme/prod/orders --stdin`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if stdin == (len(messages) > 0) {
				return errors.New("give either -m MESSAGE (one or more) or --stdin")
			}
			if count < 1 {
				return fmt.Errorf("-n must be at least 1, not %d", count)
			}
			var next func() (*client.ProducerMessage, error)
			if stdin {
				next = stdinMessages(a.stdin)
			} else {
				next = flagMessages(messages, key, count)
			}
			return a.produce(cmd.Context(), args[0], next)
		},
	}
	cmd.Flags().StringArrayVarP(&messages, "message", "m", nil, "a message payload (repeat for several)")
	cmd.Flags().StringVarP(&key, "key", "k", "", "the messages' key")
	cmd.Flags().IntVarP(&count, "num", "n", 1, "send the -m messages this many times")
	cmd.Flags().BoolVar(&stdin, "stdin", false, `read JSON lines {"key": "...", "payload": "..."} from stdin`)
	return cmd
}

// flagMessages yields the -m messages count times over, then io.EOF.
func flagMessages(messages []string, key string, count int) func() (*client.ProducerMessage, error) {
	i := 0
	return func() (*client.ProducerMessage, error) {
		if i >= len(messages)*count {
			return nil, io.EOF
		}
		m := &client.ProducerMessage{Key: key, Payload: []byte(messages[i%len(messages)])}
		i++
		return m, nil
	}
}

// stdinMessages yields one message per JSON line of r, then io.EOF.
func stdinMessages(r io.Reader) func() (*client.ProducerMessage, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxStdinLine)
	line := 0
	return func() (*client.ProducerMessage, error) {
		for sc.Scan() {
			line++
			b := sc.Bytes()
			if len(b) == 0 {
				continue
			}
			var in inputLine
			if err := json.Unmarshal(b, &in); err != nil {
				return nil, fmt.Errorf("stdin line %d: %w", line, err)
			}
			return &client.ProducerMessage{Key: in.Key, Payload: []byte(in.Payload)}, nil
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("stdin line %d: %w", line+1, err)
		}
		return nil, io.EOF
	}
}

func (a *app) produce(ctx context.Context, stream string, next func() (*client.ProducerMessage, error)) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream, SendTimeout: a.timeout})
	if err != nil {
		return err
	}
	defer p.Close()
	out := bufio.NewWriter(a.stdout)
	enc := json.NewEncoder(out)
	progress := newProgress(a.stderr, "acknowledged")
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	acked := 0
	for {
		m, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
			break
		}
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		wg.Add(1)
		p.SendAsync(ctx, m, func(id client.MessageID, m *client.ProducerMessage, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("send: %w", err)
				}
				return
			}
			enc.Encode(produced{ID: id.String(), Stream: id.Stream, Partition: id.Partition, Offset: id.Offset, Key: m.Key, Payload: string(m.Payload)})
			acked++
			progress.update(acked)
		})
	}
	wg.Wait()
	progress.done(acked)
	if err := out.Flush(); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// progress writes a count to a terminal now and then.
type progress struct {
	w     io.Writer
	what  string
	tty   bool
	last  time.Time
	shown bool
}

func newProgress(w io.Writer, what string) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progress{w: w, what: what, tty: tty}
}

func (p *progress) update(n int) {
	if !p.tty || time.Since(p.last) < 250*time.Millisecond {
		return
	}
	p.last = time.Now()
	p.shown = true
	fmt.Fprintf(p.w, "\r%d messages %s", n, p.what)
}

func (p *progress) done(n int) {
	if p.shown {
		fmt.Fprintf(p.w, "\r%d messages %s\n", n, p.what)
	}
}
