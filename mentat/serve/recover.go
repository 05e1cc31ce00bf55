package serve

import (
	"log/slog"
	"runtime/debug"
)

// recoverLog is deferred by every background loop's body so one bad round
// logs a stack instead of taking the router down.
func recoverLog(log *slog.Logger, event string, args ...any) {
	if p := recover(); p != nil {
		log.Error(event, append(args, "panic", p, "stack", string(debug.Stack()))...)
	}
}
