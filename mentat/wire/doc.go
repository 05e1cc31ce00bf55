// Package wire holds the mentat daemon protocol as the public mentat daemons
// speak it (see docs/mentat-wire.md): the /status snapshot in both shapes in
// the field, /events frames, UDP announcements with their HMAC signing over
// canonical JSON, and the endpoint forms agents announce.
//
// It is shared by the router (mentat/serve), the daemon and the agent; it
// does no I/O.
package wire
