// Package httpx holds what the router's and the gateway's listeners share
// on top of net/http: the edge limits of a public listener (Limits), the
// upstream http.Transport (NewTransport), request bodies read once into
// pooled buffers (ReadBody), the one streaming relay (Relay) and the
// hop-by-hop header rule (CopyResponseHeader, ForwardHeader). One code
// path per rule: both products call these, neither keeps its own copy.
package httpx
