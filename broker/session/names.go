package session

import (
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// fullNames writes the stream and partition names a request carries in
// their full form (persistent://TENANT/FABRIC/STREAM), so that a short
// name ("orders", a stream of public/default) or one without the scheme
// names the same stream everywhere past this point. A name that does not
// parse is left as it is: the request's handler refuses it with
// InvalidName.
func fullNames(cmd transport.Command) {
	switch c := cmd.(type) {
	case *transport.Lookup:
		c.Stream = fullPartition(c.Stream)
	case *transport.CreateProducer:
		c.Stream = fullPartition(c.Stream)
	case *transport.Subscribe:
		c.Stream = fullPartition(c.Stream)
	case *transport.PartitionedMetadata:
		c.Stream = fullStream(c.Stream)
	case *transport.CreateStream:
		c.Stream = fullStream(c.Stream)
	case *transport.DeleteStream:
		c.Stream = fullStream(c.Stream)
	case *transport.SetRetention:
		c.Stream = fullStream(c.Stream)
	case *transport.DescribeStream:
		c.Stream = fullStream(c.Stream)
	case *transport.ResetCursor:
		c.Partition = fullPartition(c.Partition)
	case *transport.DeleteSubscription:
		c.Partition = fullPartition(c.Partition)
	}
}

func fullPartition(name string) string {
	if p, err := geofabric.ParsePartition(name); err == nil {
		return p.String()
	}
	return name
}

func fullStream(name string) string {
	if st, err := geofabric.ParseStream(name); err == nil {
		return st.String()
	}
	return name
}
