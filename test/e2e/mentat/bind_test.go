package e2e

import (
	"regexp"
	"testing"
)

// An engine bound to one address of a node that the router reaches on
// another: the probe fails on the address it is allowed to try, and
// /status.json quotes the agent's bind finding beside the failure.
//
// On loopback the node's addresses are 127.0.0.1 and ::1 (lo ranked by
// MENTAT_ANNOUNCE_IFACES=lo); the engine binds 127.0.0.1 only and the
// router may only use ::1 (ALLOWED_SOURCES=::1), as a router on another
// link of a real node would be.
func TestNarrowBindBesideFailedProbe(t *testing.T) {
	d := startDaemon(t, "daemon")
	e := &engine{group: "narrow", model: "narrow-1"}
	startAgent(t, d.addr, e)
	r := startRouter(t, "router", 0, "MENTAT_DAEMONS="+d.addr, "ALLOWED_SOURCES=::1")

	v6 := "http://[::1]:" + itoa(e.port) + "/v1"
	want := regexp.MustCompile(`^endpoint probe failed: ` + regexp.QuoteMeta(v6) + `: .+ \(agent reports: bound to 127\.0\.0\.1 only\)$`)
	g := r.waitGroup(t, "narrow", "a failed probe with the bind finding", func(g groupStatus) bool { return want.MatchString(g.why()) })
	if g.Healthy || g.ActorsRunning != 1 || len(g.OpenAICandidates) != 1 || g.OpenAICandidates[0] != v6 ||
		g.OpenAINote == nil || *g.OpenAINote != "bound to 127.0.0.1 only" {
		t.Fatalf("narrow = %+v", g)
	}
	if got := r.models(t); len(got) != 0 {
		t.Fatalf("/v1/models = %v with the only allowed candidate refused", got)
	}
	e.agent.WaitOutput(t, deadline, `service_bind_narrow`)

	// The same cluster through a router allowed on 127.0.0.1 routes, and the
	// finding stays advisory.
	r2 := startRouter(t, "router-v4", 0, "MENTAT_DAEMONS="+d.addr)
	r2.waitModels(t, "narrow-1")
	if g := r2.status(t).Groups["narrow"]; !g.Healthy || g.OpenAINote == nil || *g.OpenAINote != "bound to 127.0.0.1 only" {
		t.Fatalf("narrow through a router allowed on 127.0.0.1 = %+v", g)
	}
	r2.chatOK(t, "narrow-1")
}
