package edge

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// rawAnswer is one answer a raw client read.
type rawAnswer struct {
	code   int
	header http.Header
	body   []byte
	close  bool
}

// rawResult is what a raw client saw on one connection.
type rawResult struct {
	answers []rawAnswer // final answers, in order
	interim []int       // 1xx statuses
	end     error       // what ended reading, nil when it stopped at want answers
	werr    error       // the write's error (a server that closed mid-write)
}

func (r rawResult) codes() []int {
	c := make([]int, len(r.answers))
	for i, a := range r.answers {
		c[i] = a.code
	}
	return c
}

func (r rawResult) String() string {
	return fmt.Sprintf("answers %v interim %v end %v write %v", r.codes(), r.interim, r.end, r.werr)
}

// rawTimeout bounds one raw exchange.
const rawTimeout = 10 * time.Second

// rawExchange writes payload on a fresh connection to addr (in its own
// goroutine, so a server that answers before reading it all is seen) and
// reads answers until want final ones arrived on a connection that stays
// open, the server closed, or rawTimeout. After a 100 Continue it writes
// afterContinue. An answer marked Connection: close is followed by
// reading to the end, so bytes after it count as answers too.
func rawExchange(addr string, payload, afterContinue []byte, want int) rawResult {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return rawResult{end: err}
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(rawTimeout))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		werr <- err
	}()
	var res rawResult
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			res.end = err
			break
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 200 {
			res.interim = append(res.interim, resp.StatusCode)
			if resp.StatusCode == http.StatusContinue && afterContinue != nil {
				if err := <-werr; err != nil {
					res.werr = err
				}
				b := afterContinue
				go func() {
					_, err := c.Write(b)
					werr <- err
				}()
				afterContinue = nil
			}
			continue
		}
		res.answers = append(res.answers, rawAnswer{code: resp.StatusCode, header: resp.Header, body: b, close: resp.Close})
		if err != nil {
			res.end = err
			break
		}
		if len(res.answers) >= want && !resp.Close {
			break
		}
	}
	_ = c.Close()
	if err := <-werr; err != nil && res.werr == nil {
		res.werr = err
	}
	return res
}
