// Package daemon is stratad's server: it owns the loaded models and serves
// them over HTTP on a Unix socket (and optionally TCP with an API key).
//
// Every connection on the Unix socket is identified by the kernel's peer
// credentials (package peer) and every request is authorised by package
// authz: any peer may run inference and read status; loading and unloading
// models need uid 0 or the admin group. TCP peers authenticate with a
// Bearer API key and are never administrators.
//
// The HTTP surface is the OpenAI-compatible API (package openai: models,
// chat completions, completions, streamed as server-sent events) plus the
// admin API (package api: load, unload, status), GET /metrics in the
// Prometheus text format and GET /health. Each model has a scheduler
// (package sched) that runs continuous batching over the engine's batched
// forward pass; a client that disconnects has its sequence dropped before
// its next token.
//
// The device API (devices.go, paths in package api) makes the daemon the
// owner of NVMe controllers: any peer lists them (with what of the host
// uses them) and reads their counters; an administrator binds one (it is
// handed to vfio-pci only when nothing of the host uses it, then opened
// with the userspace driver and kept in a registry), formats a strata
// volume on a namespace, writes prefab pools into it and unbinds it.
// Clients never open /dev/vfio.
//
// Until the tiered engine (engine/tier, engine/stream) is integrated, models
// run on the plain CPU engine with every weight resident: status reports
// the tier plan as absent (plan: null, with a note) and the per-tier byte
// counters stay at zero, rather than inventing numbers.
package daemon
