package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// reconcileEvery is how often a pattern consumer compares its streams with
// a fresh listing, besides the pushes of its watch: a backstop should a
// push ever be lost.
const reconcileEvery = 30 * time.Second

// MultiConsumer receives the messages of one subscription over several
// streams: a list (MultiOptions.Streams, which may span fabrics) or every
// stream of one fabric whose full name matches a pattern
// (MultiOptions.Pattern), streams created later included. Each stream
// keeps its own cursor under the subscription's name; every mode works
// across streams, with order only per partition; a message's ID names
// its stream and partition, and its ack goes there.
type MultiConsumer struct {
	c    *Client
	opts ConsumerOptions
	out  chan *Message
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	subs   map[string]*Consumer // by full stream name
	closed bool
}

// MultiOptions says which streams a MultiConsumer reads.
type MultiOptions struct {
	// Streams lists the streams, in any form a stream is named.
	Streams []string
	// Pattern is a Go regular expression matched against whole full
	// stream names, e.g. persistent://acme/eu/finance-.*; its tenant and
	// fabric must be literal. A stream of the fabric created later is
	// subscribed within a second of its creation, from its earliest
	// message; a deleted one is dropped.
	Pattern string
}

// SubscribeMulti subscribes to several streams with one subscription;
// opts.Stream must be empty, the rest of opts applies to every stream.
func (c *Client) SubscribeMulti(ctx context.Context, which MultiOptions, opts ConsumerOptions) (*MultiConsumer, error) {
	if opts.Stream != "" {
		return nil, errors.New("client: a multi-stream consumer names its streams in MultiOptions, not ConsumerOptions.Stream")
	}
	if (len(which.Streams) == 0) == (which.Pattern == "") {
		return nil, errors.New("client: a multi-stream consumer takes either a list of streams or a pattern")
	}
	if opts.Name == "" {
		opts.Name = randomName(c.opts.Name) // one name on every stream
	}
	mctx, stop := context.WithCancel(context.Background())
	mc := &MultiConsumer{c: c, opts: opts, out: make(chan *Message), ctx: mctx, stop: stop, subs: map[string]*Consumer{}}
	var err error
	if which.Pattern != "" {
		err = mc.watch(ctx, which.Pattern)
	} else {
		err = mc.subscribeAll(ctx, which.Streams, opts.SubscriptionInitialPosition)
	}
	if err != nil {
		mc.Close()
		return nil, err
	}
	return mc, nil
}

// subscribeAll subscribes to streams it does not read yet.
func (mc *MultiConsumer) subscribeAll(ctx context.Context, streams []string, initial InitialPosition) error {
	for _, s := range streams {
		st, err := geofabric.ParseStream(s)
		if err != nil {
			return err
		}
		if err := mc.add(ctx, st.String(), initial); err != nil {
			return fmt.Errorf("client: subscribe to %s: %w", st, err)
		}
	}
	return nil
}

// add subscribes to one stream and pumps its messages into out.
func (mc *MultiConsumer) add(ctx context.Context, stream string, initial InitialPosition) error {
	mc.mu.Lock()
	if mc.closed || mc.subs[stream] != nil {
		mc.mu.Unlock()
		return nil
	}
	mc.mu.Unlock()
	opts := mc.opts
	opts.Stream, opts.SubscriptionInitialPosition = stream, initial
	cons, err := mc.c.Subscribe(ctx, opts)
	if err != nil {
		return err
	}
	mc.mu.Lock()
	if mc.closed || mc.subs[stream] != nil {
		mc.mu.Unlock()
		cons.Close()
		return nil
	}
	mc.subs[stream] = cons
	mc.wg.Add(1)
	mc.mu.Unlock()
	go mc.pump(cons)
	return nil
}

// drop closes the consumer of a stream that no longer matches.
func (mc *MultiConsumer) drop(stream string) {
	mc.mu.Lock()
	cons := mc.subs[stream]
	delete(mc.subs, stream)
	mc.mu.Unlock()
	if cons != nil {
		cons.Close()
	}
}

// pump passes one stream's messages on until its consumer closes.
func (mc *MultiConsumer) pump(cons *Consumer) {
	defer mc.wg.Done()
	for {
		m, err := cons.Receive(mc.ctx)
		if err != nil {
			return
		}
		select {
		case mc.out <- m:
		case <-mc.ctx.Done():
			return
		}
	}
}

// Receive returns the next message of any of the streams.
func (mc *MultiConsumer) Receive(ctx context.Context) (*Message, error) {
	select {
	case m := <-mc.out:
		return m, nil
	case <-mc.ctx.Done():
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// consumerOf returns the consumer of a message's stream.
func (mc *MultiConsumer) consumerOf(id MessageID) (*Consumer, error) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	cons := mc.subs[id.Stream]
	if cons == nil {
		return nil, fmt.Errorf("client: message id %s is not of a stream this consumer reads", id)
	}
	return cons, nil
}

// Ack acknowledges a message on its stream.
func (mc *MultiConsumer) Ack(ctx context.Context, m *Message) error {
	cons, err := mc.consumerOf(m.ID)
	if err != nil {
		return err
	}
	return cons.Ack(ctx, m)
}

// Nack asks for a message to be delivered again, on its stream.
func (mc *MultiConsumer) Nack(m *Message) {
	if cons, err := mc.consumerOf(m.ID); err == nil {
		cons.Nack(m)
	}
}

// Name returns the consumer's name, the same on every stream.
func (mc *MultiConsumer) Name() string { return mc.opts.Name }

// Streams returns the streams the consumer reads now, sorted.
func (mc *MultiConsumer) Streams() []string {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	out := make([]string, 0, len(mc.subs))
	for s := range mc.subs {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Close closes every stream's consumer and the watch.
func (mc *MultiConsumer) Close() error {
	mc.mu.Lock()
	if mc.closed {
		mc.mu.Unlock()
		return nil
	}
	mc.closed = true
	subs := mc.subs
	mc.subs = map[string]*Consumer{}
	mc.mu.Unlock()
	mc.stop()
	for _, cons := range subs {
		cons.Close()
	}
	mc.wg.Wait()
	return nil
}

// patternFabric returns the fabric a pattern's literal prefix names:
// persistent://TENANT/FABRIC/ must be literal.
func patternFabric(pattern string) (string, *regexp.Regexp, error) {
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return "", nil, fmt.Errorf("client: stream pattern: %w", err)
	}
	prefix, _ := re.LiteralPrefix()
	rest, ok := strings.CutPrefix(prefix, geofabric.Scheme)
	parts := strings.SplitN(rest, "/", 3)
	if !ok || len(parts) < 3 {
		return "", nil, fmt.Errorf("client: stream pattern %q: its tenant and fabric must be literal, as in %sTENANT/FABRIC/finance-.*", pattern, geofabric.Scheme)
	}
	fabric := parts[0] + "/" + parts[1]
	if _, _, err := geofabric.ParseFabric(fabric); err != nil {
		return "", nil, err
	}
	return fabric, re, nil
}

// watch subscribes to the streams matching pattern now and keeps a watch
// on the fabric (watchLoop) for the streams created and deleted later.
func (mc *MultiConsumer) watch(ctx context.Context, pattern string) error {
	fabric, re, err := patternFabric(pattern)
	if err != nil {
		return err
	}
	w := &streamWatcher{mc: mc, fabric: fabric, pattern: pattern, re: re, pushed: make(chan struct{}, 1)}
	list, err := w.open(ctx)
	if err != nil {
		return err
	}
	if err := mc.subscribeAll(ctx, list, mc.opts.SubscriptionInitialPosition); err != nil {
		return err
	}
	mc.wg.Add(1)
	go w.loop()
	return nil
}

// streamWatcher keeps a pattern consumer's streams in step with the
// fabric: the node's pushes (each the whole matching list), a new watch on
// another connection when the one it had is lost, and a listing every
// reconcileEvery as a backstop.
type streamWatcher struct {
	mc      *MultiConsumer
	fabric  string
	pattern string
	re      *regexp.Regexp
	x       *cnx
	id      uint64
	// latest is the last list pushed; pushed signals it.
	mu     sync.Mutex
	latest []string
	pushed chan struct{}
}

// open opens a watch on some node and returns the matching streams.
func (w *streamWatcher) open(ctx context.Context) ([]string, error) {
	var list []string
	err := w.mc.c.retry(ctx, func(ctx context.Context) error {
		x, err := w.mc.c.anyConn(ctx)
		if err != nil {
			return err
		}
		id := w.mc.c.requestID()
		if !x.addWatch(id, w.push) {
			return errConnLost
		}
		res, err := x.request(ctx, &transport.WatchStreams{RequestID: w.mc.c.requestID(), WatchID: id, Fabric: w.fabric, Pattern: w.pattern})
		if err != nil {
			x.removeWatch(id)
			return err
		}
		r, ok := res.(*transport.WatchStreamsResult)
		if !ok {
			x.removeWatch(id)
			return fmt.Errorf("client: unexpected answer %T to a stream watch", res)
		}
		w.x, w.id, list = x, id, r.Streams
		return nil
	})
	return list, err
}

// push takes a pushed list, keeping only the latest; it never blocks the
// connection's reader.
func (w *streamWatcher) push(c *transport.StreamsChanged) {
	w.mu.Lock()
	w.latest = c.Streams
	w.mu.Unlock()
	select {
	case w.pushed <- struct{}{}:
	default:
	}
}

// loop applies pushed lists, reopens the watch when its connection goes,
// and reconciles with a listing now and then, until the consumer closes.
func (w *streamWatcher) loop() {
	defer w.mc.wg.Done()
	defer w.close()
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
	for {
		var list []string
		select {
		case <-w.mc.ctx.Done():
			return
		case <-w.pushed:
			w.mu.Lock()
			list = w.latest
			w.mu.Unlock()
		case <-w.x.done:
			w.x.removeWatch(w.id)
			l, err := w.open(w.mc.ctx)
			if err != nil {
				continue // closed, or no node answers yet: open retried within the operation timeout
			}
			list = l
		case <-tick.C:
			l, err := w.listing()
			if err != nil {
				continue
			}
			list = l
		}
		w.apply(list)
	}
}

// listing lists the fabric's streams that match, as a backstop.
func (w *streamWatcher) listing() ([]string, error) {
	all, err := w.mc.c.ListStreams(w.mc.ctx, w.fabric)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(s string) bool { return !w.re.MatchString(s) }), nil
}

// apply subscribes to the streams new in list, from their earliest
// message (created after the consumer started, nothing of them may be
// missed), and drops the streams gone from it. A new stream that the node
// asked does not know yet (its catalog lags the one that pushed) is tried
// again for a few seconds, then left to the next push or listing.
func (w *streamWatcher) apply(list []string) {
	now := map[string]bool{}
	for _, s := range list {
		now[s] = true
		err := w.mc.add(w.mc.ctx, s, Earliest)
		for wait := 50 * time.Millisecond; err != nil && wait < 5*time.Second && w.mc.ctx.Err() == nil; wait *= 2 {
			select {
			case <-w.mc.ctx.Done():
			case <-time.After(wait):
			}
			err = w.mc.add(w.mc.ctx, s, Earliest)
		}
		if err != nil && w.mc.ctx.Err() == nil {
			w.mc.c.logger.Warn("pattern consumer: cannot subscribe to a new stream yet", "stream", s, "err", err)
		}
	}
	for _, s := range w.mc.Streams() {
		if !now[s] {
			w.mc.drop(s)
		}
	}
}

// close ends the watch on its node.
func (w *streamWatcher) close() {
	w.x.removeWatch(w.id)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = w.x.request(ctx, &transport.CloseWatch{RequestID: w.mc.c.requestID(), WatchID: w.id})
}
