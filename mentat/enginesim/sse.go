package enginesim

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// sseWriter writes server-sent events and flushes each one at once: a frame
// must leave when its token is due, not when a buffer fills.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

// startSSE sends the response headers right away, as vLLM's
// StreamingResponse does before the first token.
func startSSE(w http.ResponseWriter) (*sseWriter, error) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512)}
	return s, s.rc.Flush()
}

// send writes and flushes s.buf, then empties it for reuse.
func (s *sseWriter) send() error {
	_, err := s.w.Write(s.buf)
	s.buf = s.buf[:0]
	if err != nil {
		return err
	}
	return s.rc.Flush()
}

var doneFrame = []byte("data: [DONE]\n\n")

// quotedWords are the JSON strings of each word, bare and with a leading
// space, so a token frame is built by appends alone.
var quotedWords = func() [][2][]byte {
	q := make([][2][]byte, len(words))
	for i, w := range words {
		q[i][0] = []byte(`"` + w + `"`)
		q[i][1] = []byte(`" ` + w + `"`)
	}
	return q
}()

// wordToken is the token id of generated word number i: the word with a
// leading space after the first, as the tokenizer reads the text back.
func wordToken(i, word int) int {
	if i == 0 {
		return wordBase + 2*word
	}
	return wordBase + 2*word + 1
}

func wordPiece(i, word int) string {
	if i == 0 {
		return words[word]
	}
	return " " + words[word]
}

func appendWord(dst []byte, i, word int) []byte {
	if i == 0 {
		return append(dst, quotedWords[word][0]...)
	}
	return append(dst, quotedWords[word][1]...)
}

// chunkEncoder builds the frames of one streamed response. head is
// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`.
type chunkEncoder struct {
	head         []byte
	chat         bool
	promptTokens int
	continuous   bool // stream_options.continuous_usage_stats
}

func newChunkEncoder(j *job, chat, continuous bool) *chunkEncoder {
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	model, _ := json.Marshal(j.model)
	h := make([]byte, 0, 128)
	h = append(h, `data: {"id":"`...)
	h = append(h, j.id...)
	h = append(h, `","object":"`...)
	h = append(h, object...)
	h = append(h, `","created":`...)
	h = strconv.AppendInt(h, j.created, 10)
	h = append(h, `,"model":`...)
	h = append(h, model...)
	h = append(h, `,"choices":[`...)
	return &chunkEncoder{head: h, chat: chat, promptTokens: j.promptTokens, continuous: continuous}
}

func appendUsage(dst []byte, prompt, completion int) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt+completion), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	return append(dst, '}')
}

func (c *chunkEncoder) tail(dst []byte, completion int) []byte {
	dst = append(dst, ']')
	if c.continuous {
		dst = append(dst, `,"usage":`...)
		dst = appendUsage(dst, c.promptTokens, completion)
	}
	return append(dst, "}\n\n"...)
}

// appendRole is the chat stream's first frame, the assistant role.
func (c *chunkEncoder) appendRole(dst []byte) []byte {
	dst = append(dst, c.head...)
	dst = append(dst, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`...)
	return c.tail(dst, 0)
}

// appendToken is the frame of token i; finish is set on the last one.
func (c *chunkEncoder) appendToken(dst []byte, i, word int, finish string) []byte {
	dst = append(dst, c.head...)
	if c.chat {
		dst = append(dst, `{"index":0,"delta":{"content":`...)
		dst = appendWord(dst, i, word)
		dst = append(dst, `},"logprobs":null,`...)
	} else {
		dst = append(dst, `{"index":0,"text":`...)
		dst = appendWord(dst, i, word)
		dst = append(dst, `,"logprobs":null,`...)
	}
	if finish == "" {
		if c.chat {
			dst = append(dst, `"finish_reason":null}`...)
		} else {
			dst = append(dst, `"finish_reason":null,"stop_reason":null}`...)
		}
	} else {
		dst = append(dst, `"finish_reason":"`...)
		dst = append(dst, finish...)
		dst = append(dst, `","stop_reason":null}`...)
	}
	return c.tail(dst, i+1)
}

// appendUsageFrame is the final usage frame of stream_options.include_usage:
// no choices, the totals, and prompt_tokens_details when cached >= 0
// (--enable-prompt-tokens-details).
func (c *chunkEncoder) appendUsageFrame(dst []byte, completion, cached int) []byte {
	dst = append(dst, c.head...)
	dst = append(dst, `],"usage":`...)
	dst = appendUsage(dst, c.promptTokens, completion)
	if cached >= 0 {
		dst = append(dst[:len(dst)-1], `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, int64(cached), 10)
		dst = append(dst, "}}"...)
	}
	return append(dst, "}\n\n"...)
}

// streamOptions is the request's stream_options.
type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// stream plays j as an event stream on w. Errors after the headers went
// out cannot reach the client as a status; the stream just ends, and a
// client that went away frees the slot through ctx.
func (e *Engine) stream(w http.ResponseWriter, r *http.Request, t *ticket, j *job, chat bool, opts *streamOptions) {
	var o streamOptions
	if opts != nil {
		o = *opts
	}
	enc := newChunkEncoder(j, chat, o.ContinuousUsageStats)
	sw, err := startSSE(w)
	if err != nil {
		e.sched.release(t)
		e.stats.finished(finishAbort)
		return
	}
	_, n, err := e.generate(r.Context(), t, j, func(i, word int, finish string) error {
		if i == 0 && chat {
			sw.buf = enc.appendRole(sw.buf)
		}
		sw.buf = enc.appendToken(sw.buf, i, word, finish)
		return sw.send()
	})
	if err != nil {
		return
	}
	if o.IncludeUsage {
		cached := -1
		if e.cfg.EnablePromptTokensDetails {
			cached = j.cachedTokens
		}
		sw.buf = enc.appendUsageFrame(sw.buf, n, cached)
	}
	sw.buf = append(sw.buf, doneFrame...)
	_ = sw.send()
}
