package server

import _ "embed"

//go:generate go run ../../cmd/gen-openapi -out ../../docs/openapi.json -embed openapi.json

// OpenAPIDocument is the embedded copy of docs/openapi.json served at
// GET /openapi.json. cmd/gen-openapi writes both from mortred/envelope; a
// test fails when either is stale.
//
//go:embed openapi.json
var OpenAPIDocument []byte
