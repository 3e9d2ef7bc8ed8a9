// Package authz decides what a connected peer may do and where models may
// be loaded from. stratad runs privileged, so the rules are deliberately
// few and fail closed: any peer that can open the socket may run inference
// and read status; changing what the daemon holds (loading and unloading
// models, binding devices, writing pools) needs uid 0 or membership of the
// admin group, established from kernel credentials (package peer). Model
// paths sent by clients resolve only inside configured directories, after
// symlinks are followed, so an admin-group member cannot make the root
// daemon open arbitrary files.
package authz
