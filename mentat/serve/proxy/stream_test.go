package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// sseHandler emits n vLLM-style chunks every interval, then [DONE]. gate,
// if set, holds every frame after the first until it is closed.
func sseHandler(n int, interval time.Duration, gate <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "max-age=3600") // must be overridden
		fl := w.(http.Flusher)
		for i := 0; i < n; i++ {
			if i == 1 && gate != nil {
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
			if i > 0 {
				select {
				case <-time.After(interval):
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"tok%d\"}}]}\n\n", i)
			fl.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}
}

// TestStreamFirstFrameEarly proves no buffering with timestamps: frames
// are 150 ms apart over about 3 s, and the first must reach the client
// long before the last.
func TestStreamFirstFrameEarly(t *testing.T) {
	eng := newEngine(t, sseHandler(20, 150*time.Millisecond, nil))
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)

	start := time.Now()
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
	defer resp.Body.Close()
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "X-Accel-Buffering": "no", "Cache-Control": "no-cache"} {
		if got := resp.Header.Get(k); got != want {
			t.Fatalf("header %s = %q, want %q", k, got, want)
		}
	}
	br := bufio.NewReader(resp.Body)
	var arrivals []time.Duration
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			if len(arrivals) < 20 && !strings.Contains(line, fmt.Sprintf("tok%d", len(arrivals))) {
				t.Fatalf("frame %d out of order: %q", len(arrivals), line)
			}
			arrivals = append(arrivals, time.Since(start))
		}
	}
	if len(arrivals) != 21 {
		t.Fatalf("got %d frames, want 21", len(arrivals))
	}
	first, last := arrivals[0], arrivals[len(arrivals)-1]
	// The engine needs ≥ 2.85 s to produce the last frame. A buffering
	// proxy delivers the first with it; ours must deliver it at least
	// 1.5 s earlier, however loaded the machine.
	if last-first < 1500*time.Millisecond {
		t.Fatalf("first frame at %v, last at %v: frames were held back", first, last)
	}
}

// TestStreamNotBuffered is the same proof without clocks: the engine sends
// one frame and then waits until the client has it. A proxy that holds
// frames back deadlocks here and the test times out.
func TestStreamNotBuffered(t *testing.T) {
	gate := make(chan struct{})
	eng := newEngine(t, sseHandler(3, time.Millisecond, gate))
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if !strings.Contains(line, "tok0") {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(15 * time.Second):
		close(gate)
		t.Fatal("first frame never reached the client while the engine waited: the proxy buffers")
	}
	close(gate)
	io.Copy(io.Discard, resp.Body)
}

// TestSlowReaderBoundedMemory: the engine pushes up to 200 MiB as fast as
// it can; the client reads slowly through a small buffer. Backpressure
// must hold the engine back (it can only get ahead by the socket buffers)
// and the router's heap must not grow with the answer.
func TestSlowReaderBoundedMemory(t *testing.T) {
	const total = 200 << 20
	var pushed int64
	engineDone := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(engineDone)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte("data: " + strings.Repeat("x", 64<<10-8) + "\n\n")
		for pushed < total {
			n, err := w.Write(chunk)
			pushed += int64(n) // read after engineDone closes
			if err != nil {
				return
			}
		}
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc

	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
	buf := make([]byte, 4<<10)
	var read int64
	var peak uint64
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; read < 16<<20 && time.Now().Before(deadline); i++ {
		n, err := resp.Body.Read(buf)
		read += int64(n)
		if err != nil {
			t.Fatalf("after %d bytes: %v", read, err)
		}
		if i%256 == 0 {
			time.Sleep(5 * time.Millisecond) // slow reader
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
	}
	resp.Body.Close() // hang up: the engine must be released
	<-engineDone
	if read < 1<<20 {
		t.Fatalf("client read only %d bytes", read)
	}
	if pushed >= total {
		t.Fatalf("engine wrote all %d bytes while the client read %d: no backpressure", pushed, read)
	}
	// The engine is ahead of the client only by socket buffers (a few
	// MiB each on loopback) and one copy buffer.
	if ahead := pushed - read; ahead > 64<<20 {
		t.Fatalf("engine got %d MiB ahead of the client", ahead>>20)
	}
	if growth := int64(peak) - int64(base); growth > 32<<20 {
		t.Fatalf("heap grew by %d MiB while relaying a slow stream", growth>>20)
	}
	t.Logf("client read %d MiB, engine pushed %d MiB, heap peak +%d KiB", read>>20, pushed>>20, (int64(peak)-int64(base))>>10)
}

// TestClientDisconnectCancelsUpstream: a client that hangs up mid-stream
// ends the engine's request at once; the in-flight row leaves and the
// request counts as 499.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	engineSawCancel := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				close(engineSawCancel)
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: 0\n" {
		t.Fatalf("first frame %q, %v", line, err)
	}
	if n := rt.p.Inflight().Len(); n != 1 {
		t.Fatalf("%d rows in flight during the stream, want 1", n)
	}
	resp.Body.Close()
	select {
	case <-engineSawCancel:
	case <-time.After(15 * time.Second):
		t.Fatal("engine kept generating after the client hung up")
	}
	eventually(t, "the in-flight row to leave", func() bool { return rt.p.Inflight().Len() == 0 })
	eventually(t, "a 499 to be counted", func() bool { return counter(t, rt.reg, "m", "499") == 1 })
}

// TestEngineDiesMidStream: an engine that drops its connection after the
// first frame must not look like a finished stream to the client (no clean
// end-of-chunks), and counts as 502.
func TestEngineDiesMidStream(t *testing.T) {
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 0\n\n")
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	})
	rt := newRouter(t, Config{})
	rt.publish(t, map[string]string{"m": eng.base()}, nil)
	resp := rt.post(t, "/v1/chat/completions", jsonCT, `{"model":"m","stream":true}`)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("stream from a dead engine ended cleanly after %q", b)
	}
	if string(b) != "data: 0\n\n" {
		t.Fatalf("frames before the cut: %q", b)
	}
	eventually(t, "a 502 to be counted", func() bool { return counter(t, rt.reg, "m", "502") == 1 })
}
