package wire

import "encoding/json"

// Event types a daemon sends on /events after the first snapshot frame.
const (
	EventSnapshot      = "snapshot"
	EventNodeJoin      = "node_join"
	EventNodeLeave     = "node_leave"
	EventAgentRegister = "agent_register"
	EventAgentLost     = "agent_lost"
	EventAgentDead     = "agent_dead"
	EventServiceNote   = "service_note"
	EventActorSpawning = "actor_spawning"
	EventActorRunning  = "actor_running"
	EventActorDead     = "actor_dead"
)

// Event is one /events WebSocket frame. The first frame is a snapshot (Data
// set); the rest carry a Patch. Readers may treat any frame as a doorbell.
type Event struct {
	Type  string          `json:"type"`
	Seq   int64           `json:"seq"`
	TsMs  int64           `json:"ts_ms,omitempty"`
	Node  string          `json:"node,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
	Patch []PatchOp       `json:"patch,omitempty"`
}

// PatchOp sets the value at a path, or removes the path when Value is nil.
type PatchOp struct {
	At    []string        `json:"at"`
	Value json.RawMessage `json:"value,omitempty"`
}
