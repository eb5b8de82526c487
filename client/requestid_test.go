package client

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/fabriq-io/fabriq/transport"
)

// Every command of the protocol that carries a request id is matched to
// its answer by it: one requestIDOf does not know would be sent under id 0
// and its answer never found, so the request hangs until its timeout.
func TestRequestIDOfKnowsEveryRequest(t *testing.T) {
	const id = 7
	carried := 0
	for ct := 1; ct < 256; ct++ {
		body, err := msgpack.Marshal([]any{ct, map[string]any{"r": id}})
		if err != nil {
			t.Fatal(err)
		}
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		cmd, err := transport.ReadFrame(bytes.NewReader(append(frame, body...)), 0)
		if err != nil {
			continue // not a command type
		}
		f := reflect.ValueOf(cmd).Elem().FieldByName("RequestID")
		if !f.IsValid() {
			continue
		}
		if f.Uint() != id {
			t.Fatalf("%s: its request id is not under the key r", cmd.Type())
		}
		carried++
		if got := requestIDOf(cmd); got != id {
			t.Errorf("requestIDOf(%s) = %d, want %d", cmd.Type(), got, id)
		}
	}
	if carried < 40 {
		t.Fatalf("only %d command types carry a request id: the frames built here are not read as commands", carried)
	}
}
