package transport

import "fmt"

var typeNames = [...]string{
	TypeConnect:                   "Connect",
	TypeConnected:                 "Connected",
	TypePing:                      "Ping",
	TypePong:                      "Pong",
	TypeLookup:                    "Lookup",
	TypeLookupResult:              "LookupResult",
	TypePartitionedMetadata:       "PartitionedMetadata",
	TypePartitionedMetadataResult: "PartitionedMetadataResult",
	TypeCreateProducer:            "CreateProducer",
	TypeProducerReady:             "ProducerReady",
	TypeSend:                      "Send",
	TypeSendReceipt:               "SendReceipt",
	TypeSendError:                 "SendError",
	TypeSubscribe:                 "Subscribe",
	TypeSubscribeReady:            "SubscribeReady",
	TypeFlow:                      "Flow",
	TypeMessage:                   "Message",
	TypeAck:                       "Ack",
	TypeNack:                      "Nack",
	TypeRedeliverUnacked:          "RedeliverUnacked",
	TypeSeek:                      "Seek",
	TypeUnsubscribe:               "Unsubscribe",
	TypeCloseProducer:             "CloseProducer",
	TypeCloseConsumer:             "CloseConsumer",
	TypeActiveConsumerChange:      "ActiveConsumerChange",
	TypeCreateStream:              "CreateStream",
	TypeDeleteStream:              "DeleteStream",
	TypeListStreams:               "ListStreams",
	TypeListStreamsResult:         "ListStreamsResult",
	TypeDescribeStream:            "DescribeStream",
	TypeDescribeStreamResult:      "DescribeStreamResult",
	TypeSuccess:                   "Success",
	TypeError:                     "Error",
	TypeClusterStatus:             "ClusterStatus",
	TypeClusterStatusResult:       "ClusterStatusResult",
	TypeRenewReplica:              "RenewReplica",
	TypeSetRetention:              "SetRetention",
	TypeCreateTenant:              "CreateTenant",
	TypeDeleteTenant:              "DeleteTenant",
	TypeListTenants:               "ListTenants",
	TypeListTenantsResult:         "ListTenantsResult",
	TypeCreateFabric:              "CreateFabric",
	TypeDeleteFabric:              "DeleteFabric",
	TypeListFabrics:               "ListFabrics",
	TypeListFabricsResult:         "ListFabricsResult",
	TypeDescribeFabric:            "DescribeFabric",
	TypeDescribeFabricResult:      "DescribeFabricResult",
	TypeWatchStreams:              "WatchStreams",
	TypeWatchStreamsResult:        "WatchStreamsResult",
	TypeStreamsChanged:            "StreamsChanged",
	TypeCloseWatch:                "CloseWatch",
	TypeSetFabricRegions:          "SetFabricRegions",
	TypeResetCursor:               "ResetCursor",
	TypeDeleteSubscription:        "DeleteSubscription",
}

// String returns the command's name, "Send" for TypeSend.
func (t CommandType) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("CommandType(%d)", uint8(t))
}
