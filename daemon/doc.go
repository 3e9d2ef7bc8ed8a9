// Package daemon will hold stratad's server: listeners, peer-credential
// authorisation, the OpenAI-compatible and admin handlers, the model
// registry, the request scheduler and metrics (issue 4). Nothing is
// implemented here yet; the package exists so the design card's layout is
// fixed from the first commit.
package daemon
