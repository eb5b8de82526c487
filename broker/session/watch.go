package session

import (
	"regexp"
	"slices"
	"strings"

	"github.com/fabriq-io/fabriq/broker/wire"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

const (
	// maxWatches bounds the stream watches one connection holds.
	maxWatches = 64
	// maxPattern bounds a watch's regular expression, in bytes.
	maxPattern = 1024
)

// streamWatch is one open WatchStreams: its loop runs until stop closes
// or the session ends.
type streamWatch struct {
	stop chan struct{}
}

// watchStreams answers a WatchStreams with the matching streams and keeps
// pushing the set after every change (streamsLoop).
func (s *Session) watchStreams(c *transport.WatchStreams) {
	tenant, fabric, err := geofabric.ParseFabric(c.Fabric)
	if err != nil {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidName, "%v", err))
		return
	}
	if len(c.Pattern) > maxPattern {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "a stream pattern of %d bytes; at most %d", len(c.Pattern), maxPattern))
		return
	}
	re, err := regexp.Compile("^(?:" + c.Pattern + ")$")
	if err != nil {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "stream pattern: %v", err))
		return
	}
	if _, err := s.node.DescribeFabric(tenant + "/" + fabric); err != nil {
		s.replyErr(c.RequestID, err)
		return
	}
	w := &streamWatch{stop: make(chan struct{})}
	s.mu.Lock()
	switch {
	case len(s.watches) >= maxWatches:
		s.mu.Unlock()
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeLimitExceeded, "this connection holds %d stream watches, the most it may", maxWatches))
		return
	case s.watches[c.WatchID] != nil:
		s.mu.Unlock()
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "watch %d is open already", c.WatchID))
		return
	}
	s.watches[c.WatchID] = w
	s.wg.Add(1)
	s.mu.Unlock()
	// The watch is registered before the list is taken: a stream created
	// between the two is pushed, never lost.
	changed := s.node.StreamsChanged()
	prefix := geofabric.Scheme + tenant + "/" + fabric + "/"
	list := s.matching(prefix, re)
	s.reply(&transport.WatchStreamsResult{RequestID: c.RequestID, Streams: list, Hash: transport.StreamsHash(list)})
	go s.streamsLoop(w, c.WatchID, prefix, re, changed, list)
}

// streamsLoop pushes a watch's matching streams after every change of the
// catalog that changes them.
func (s *Session) streamsLoop(w *streamWatch, id uint64, prefix string, re *regexp.Regexp, changed <-chan struct{}, last []string) {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case <-w.stop:
			return
		case <-changed:
		}
		changed = s.node.StreamsChanged()
		now := s.matching(prefix, re)
		if !slices.Equal(now, last) {
			s.reply(&transport.StreamsChanged{WatchID: id, Streams: now, Hash: transport.StreamsHash(now)})
			last = now
		}
	}
}

// matching returns the streams of a fabric (prefix) whose names match re,
// sorted.
func (s *Session) matching(prefix string, re *regexp.Regexp) []string {
	out := []string{}
	for _, name := range s.node.Streams() {
		if strings.HasPrefix(name, prefix) && re.MatchString(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// closeWatch ends a watch.
func (s *Session) closeWatch(c *transport.CloseWatch) {
	s.mu.Lock()
	w := s.watches[c.WatchID]
	delete(s.watches, c.WatchID)
	s.mu.Unlock()
	if w == nil {
		s.replyErr(c.RequestID, wire.Errorf(transport.CodeInvalidArgument, "no watch %d on this connection", c.WatchID))
		return
	}
	close(w.stop)
	s.reply(&transport.Success{RequestID: c.RequestID})
}
