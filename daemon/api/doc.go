// Package api is the wire format of stratad's admin API (load, unload,
// status) — the part that is not OpenAI's. Like package openai it imports
// nothing heavy, so the strata client shares these types with the daemon
// instead of redeclaring them.
//
// Paths (all JSON):
//
//	GET  /strata/v1/status          any peer   Status
//	POST /strata/v1/models/load     admin      LoadRequest → ModelStatus
//	POST /strata/v1/models/unload   admin      UnloadRequest → UnloadResponse
//	GET  /metrics                   any peer   Prometheus text format
//	GET  /health                    any peer   Health
package api
