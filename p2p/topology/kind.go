package topology

// Kind names a route.
type Kind string

// Route kinds.
const (
	KindHostPinned Kind = "host-pinned"
	KindPeerBAR    Kind = "peer-bar"
	KindDmaBuf     Kind = "dma-buf"
)
