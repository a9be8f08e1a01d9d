// Package relay is roomrelay's wire protocol v1, shared by the agent and the hub.
//
// It defines the frames exchanged over the agent's websocket (one JSON object
// per text frame, discriminated by "type"), the codec with its size limit and
// the close codes a peer uses when it refuses a frame, the closed set of error
// codes a command can fail with, and the protocol version negotiation.
//
// The package opens no sockets and does no I/O: it turns bytes into typed
// frames and back, so both ends and their tests share one definition.
package relay
