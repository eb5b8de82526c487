package storage

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestReadAheadReadsTheRegion reads random regions of a real file in
// random-sized pieces, across fills that grow and reads that bypass the
// buffer, and compares with the file's bytes.
func TestReadAheadReadsTheRegion(t *testing.T) {
	data := make([]byte, 3*readBufferSize+123)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 200 {
		pos := rng.Int64N(int64(len(data)))
		end := pos + rng.Int64N(int64(len(data))-pos+1)
		ra := newReadAhead(f, pos, end)
		var got bytes.Buffer
		for {
			p := make([]byte, 1+rng.IntN(2*readBufferSize))
			if rng.IntN(2) == 0 {
				p = p[:1+rng.IntN(64)]
			}
			n, err := ra.Read(p)
			got.Write(p[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("region [%d,%d): %v", pos, end, err)
			}
		}
		ra.release()
		if !bytes.Equal(got.Bytes(), data[pos:end]) {
			t.Fatalf("region [%d,%d): read %d bytes that differ from the file", pos, end, got.Len())
		}
	}
}

// TestReadAheadCutShort: a region that runs past the end of the file is
// an unexpected EOF, not a quiet end.
func TestReadAheadCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, want := range []int{1500, 5000} { // through the buffer, and direct
		ra := newReadAhead(f, 0, 6000)
		_, err := io.ReadFull(ra, make([]byte, want))
		ra.release()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("read of %d bytes of a 1000-byte file: %v, want io.ErrUnexpectedEOF", want, err)
		}
	}
}
