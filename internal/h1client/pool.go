package h1client

import (
	"net"
	"strings"
	"time"
)

// get takes the most recently used idle connection to addr that is still
// usable, or returns nil.
func (c *Client) get(addr string) (*conn, bool) {
	for {
		c.mu.Lock()
		list := c.idle[addr]
		if len(list) == 0 {
			c.mu.Unlock()
			return nil, false
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		c.idle[addr] = list[:len(list)-1]
		c.nIdle--
		c.mu.Unlock()
		// No clock read here: the sweeper takes connections out of the
		// pool as they pass idleTimeout (a timer's lateness past it is
		// nothing beside the servers' longer keep-alive).
		if pc.br.Buffered() == 0 && pc.alive() {
			return pc, true
		}
		pc.nc.Close()
	}
}

func (c *Client) put(pc *conn) {
	pc.idleAt = time.Now()
	c.mu.Lock()
	list := c.idle[pc.addr]
	if len(list) >= c.maxIdle {
		c.mu.Unlock()
		pc.nc.Close()
		return
	}
	c.idle[pc.addr] = append(list, pc)
	c.nIdle++
	start := !c.sweeping
	c.sweeping = true
	c.mu.Unlock()
	if start {
		go c.sweep()
	}
}

// sweep closes connections idle for idleTimeout. It runs while the pool
// holds any, and returns once it is empty.
func (c *Client) sweep() {
	t := time.NewTimer(c.idleTimeout)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.wake:
		}
		now := time.Now()
		var expired []*conn
		next := c.idleTimeout
		c.mu.Lock()
		for addr, list := range c.idle {
			i := 0
			for i < len(list) && now.Sub(list[i].idleAt) >= c.idleTimeout {
				i++
			}
			expired = append(expired, list[:i]...)
			n := copy(list, list[i:])
			clear(list[n:])
			list = list[:n]
			c.nIdle -= i
			if n == 0 {
				delete(c.idle, addr)
				continue
			}
			c.idle[addr] = list
			next = min(next, c.idleTimeout-now.Sub(list[0].idleAt))
		}
		done := c.nIdle == 0
		if done {
			c.sweeping = false
		}
		c.mu.Unlock()
		for _, pc := range expired {
			pc.nc.Close()
		}
		if done {
			return
		}
		t.Reset(max(next, time.Millisecond))
	}
}

// CloseIdle closes every idle connection; the sweeper, if running, sees
// the empty pool and returns.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	var all []*conn
	for _, list := range c.idle {
		all = append(all, list...)
	}
	clear(c.idle)
	c.nIdle = 0
	c.mu.Unlock()
	for _, pc := range all {
		pc.nc.Close()
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// DialAddr is host:port for a URL host, port 80 when none is given.
func DialAddr(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && i > strings.LastIndexByte(host, ']') {
		if i == len(host)-1 {
			return host + "80"
		}
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}
