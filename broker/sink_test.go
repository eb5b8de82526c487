package broker

import "io"

// memSink is a Raft snapshot sink in memory.
type memSink struct {
	buf []byte
}

func (s *memSink) Write(p []byte) (int, error) { s.buf = append(s.buf, p...); return len(p), nil }
func (s *memSink) Close() error                { return nil }
func (s *memSink) ID() string                  { return "mem" }
func (s *memSink) Cancel() error               { return nil }

type readCloser struct {
	b []byte
}

func (r *readCloser) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}
func (r *readCloser) Close() error { return nil }

func nopCloser(b []byte) *readCloser { return &readCloser{b: b} }
