// Command stratad is strata's privileged daemon: it owns the loaded models
// and serves them over a Unix socket (OpenAI-compatible API + admin API),
// and over TCP with an API key when asked to. It runs under systemd
// (socket activation, sd_notify, watchdog; units in setup/systemd) or by
// hand:
//
//	stratad --socket PATH --model FILE
//	stratad --socket PATH --model FILE --listen 127.0.0.1:PORT --api-key KEY
//	stratad --socket PATH --model MODEL.pool --ram 8GiB   # layers that do not fit stream
//	stratad --socket PATH --model FILE --backend cpu      # keep off the GPU
//
// Models run on the GPU (CUDA, device 0) when one is usable and on the CPU
// otherwise (--backend auto, the default); status says which, on what
// device, or why not. --backend cuda makes a missing GPU an error.
//
// The server itself is package daemon; this main parses flags, opens the
// listeners, sets up logging and handles signals.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/strata-llm/strata/daemon"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/engine/stream"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/internal/buildinfo"
	"github.com/strata-llm/strata/internal/daemon/listen"
	"github.com/strata-llm/strata/internal/synth"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the daemon failed (includes: socket in use)
	exitUsage = 2 // bad flags
)

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first SIGINT or SIGTERM starts a graceful shutdown (in-flight
	// requests get --shutdown-timeout); a second one exits at once, for the
	// operator who will not wait.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "stratad: second signal (%v): exiting now, without waiting for in-flight requests\n", sig)
		os.Exit(exitError)
	}()
	err := command().Run(ctx, os.Args)
	if err == nil {
		os.Exit(exitOK)
	}
	fmt.Fprintf(os.Stderr, "stratad: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		os.Exit(exitUsage)
	}
	os.Exit(exitError)
}

func command() *cli.Command {
	d := daemon.DefaultLimits()
	c := daemon.DefaultConnLimits()
	return &cli.Command{
		Name:    "stratad",
		Usage:   "serve language models over a Unix socket (and optionally TCP)",
		Version: buildinfo.Read().String(),
		OnUsageError: func(ctx context.Context, cmd *cli.Command, err error, isSubcommand bool) error {
			return usageError{err.Error()}
		},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: "/run/strata/strata.sock", Sources: cli.EnvVars("STRATA_SOCKET"), Usage: "Unix socket to serve on (ignored under socket activation)"},
			&cli.StringFlag{Name: "socket-mode", Value: "0660", Usage: "permission bits of the socket (octal)"},
			&cli.StringFlag{Name: "socket-group", Value: "strata", Usage: "group owning the socket (name or gid); kept as the daemon's own group when it does not exist"},
			&cli.StringSliceFlag{Name: "model", Aliases: []string{"m"}, Usage: "model FILE to load at start (repeatable), or a pool on a strata volume as nvme://BDF/NSID/NAME (the controller is bound if stratad does not hold it yet); name = file name without extension, or NAME=FILE"},
			&cli.BoolFlag{Name: "default-model", Usage: "also load the default model, the embedded stories260K (a tiny trained story model, written to the cache, as strata run does)"},
			&cli.BoolFlag{Name: "block-trace", Value: true, Usage: "trace block I/O with eBPF for status and /metrics (needs BTF and CAP_BPF; without them the daemon says so and runs on)"},
			&cli.StringFlag{Name: "backend", Value: "auto", Sources: cli.EnvVars("STRATAD_BACKEND"), Usage: "where models run unless a load names one: auto (the GPU when CUDA is usable, else the CPU), cpu, or cuda (fail without a GPU)"},
			&cli.StringFlag{Name: "vram", Usage: "device memory budget for the --model files, e.g. 24GiB (default: the GPU's free memory less a reserve; on the CPU backend none: device memory is host memory)"},
			&cli.StringFlag{Name: "ram", Usage: "host memory budget for the --model files, e.g. 32GiB (default: MemAvailable minus a reserve); layers of a prefab pool that do not fit stream every pass"},
			&cli.IntFlag{Name: "ctx", HideDefault: true, Usage: "per-sequence context the --model files' KV cache is planned for (default: the model's, at most 4096)"},
			&cli.IntFlag{Name: "depth", Usage: "streaming pipeline depth for the --model files (0 = the planner chooses)"},
			&cli.StringFlag{Name: "tiers", Usage: "force the --model files' placement: all-A, all-B, all-C, mixed or A,C,B,... (tests and benchmarks)"},
			&cli.StringSliceFlag{Name: "cors-origin", Usage: "a web origin whose pages may call the TCP API (repeatable; * for any); off by default"},
			&cli.StringFlag{Name: "draft", Usage: "speculative decoding for the --model files with this draft model (same vocabulary; it runs where the model runs, on the CPU when the GPU has no room for it); requests opt out with \"speculative\": false"},
			&cli.BoolFlag{Name: "lookup", Usage: "speculative decoding by prompt lookup for the --model files, when no --draft is given"},
			&cli.IntFlag{Name: "self-draft", Usage: "speculative decoding for the --model files with each model's own first N layers and output head as the drafter (on the GPU when those layers are resident there, taking one of its sequences; else on the CPU), when neither --draft nor --lookup is given (off by default)"},
			&cli.StringFlag{Name: "verify", Value: "always", Usage: "when streamed (tier-C) extents are checked against the pool's checksums: always (every read; the default), first (each extent's first read) or never"},
			&cli.StringFlag{Name: "skip-layers", Usage: "leave layers out of every pass (CPU backend; costs quality, see strata bench quality): auto, a count N, or a list 4,9 (off by default)"},
			&cli.StringSliceFlag{Name: "model-dir", Value: []string{"/var/lib/strata/models"}, Usage: "directory the admin API may load models from (repeatable)"},
			&cli.StringFlag{Name: "admin-group", Value: "strata-admin", Usage: "group whose members may load and unload models (besides root)"},
			&cli.StringFlag{Name: "listen", Usage: "also serve TCP on ADDR (e.g. 127.0.0.1:8080); needs --api-key"},
			&cli.StringFlag{Name: "api-key", Sources: cli.EnvVars("STRATAD_API_KEY"), Usage: "API key required as 'Authorization: Bearer KEY' on TCP"},
			&cli.StringFlag{Name: "api-key-file", Usage: "read the API key from this file (keeps it out of the process list)"},
			&cli.Int64Flag{Name: "max-body-bytes", Value: d.MaxBodyBytes, Usage: "largest request body"},
			&cli.IntFlag{Name: "max-prompt-tokens", Value: 0, Usage: "largest prompt in tokens (0 = the model's context)"},
			&cli.IntFlag{Name: "max-tokens", Value: d.MaxTokens, Usage: "largest (and default) max_tokens"},
			&cli.IntFlag{Name: "max-queue", Value: d.MaxQueue, Usage: "requests that may wait per model before 429"},
			&cli.IntFlag{Name: "max-batch", Value: d.MaxBatch, Usage: "sequences per batched forward pass"},
			&cli.DurationFlag{Name: "read-header-timeout", Value: c.ReadHeaderTimeout, Usage: "how long a request's line and headers may take"},
			&cli.DurationFlag{Name: "read-timeout", Value: c.ReadTimeout, Usage: "how long a request's body may take after its headers"},
			&cli.DurationFlag{Name: "write-timeout", Value: c.WriteTimeout, Usage: "how long one write to a client may block (a stream's client that reads nothing for this long loses it)"},
			&cli.DurationFlag{Name: "idle-timeout", Value: c.IdleTimeout, Usage: "how long a kept-alive connection may wait for its next request"},
			&cli.IntFlag{Name: "max-conns", Value: c.MaxConns, Usage: "open connections in total before 503 (root's Unix connections exempt; lowered to half the descriptor limit)"},
			&cli.IntFlag{Name: "max-conns-per-peer", Value: c.MaxConnsPerPeer, Usage: "open connections of one peer (Unix: uid; TCP: address) before 429"},
			&cli.IntFlag{Name: "max-requests-per-peer", Usage: "sequences one peer may have queued or running per model before 429 (0 = three quarters of max-batch + max-queue)"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: 30 * time.Second, Usage: "grace period for in-flight requests on shutdown"},
			&cli.StringFlag{Name: "log-level", Value: "info", Sources: cli.EnvVars("STRATAD_LOG"), Usage: "trace, debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "auto", Usage: "auto (JSON unless stderr is a terminal), json or text"},
		},
		Action: run,
	}
}

func run(ctx context.Context, cmd *cli.Command) error {
	if cmd.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected arguments: %v", cmd.Args().Slice())}
	}
	log, err := newLogger(cmd.String("log-level"), cmd.String("log-format"))
	if err != nil {
		return err
	}
	mode, err := strconv.ParseUint(cmd.String("socket-mode"), 8, 32)
	if err != nil || mode > 0o777 {
		return usageError{fmt.Sprintf("--socket-mode %q is not an octal permission", cmd.String("socket-mode"))}
	}
	key := cmd.String("api-key")
	if f := cmd.String("api-key-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading --api-key-file: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	addr := cmd.String("listen")
	if addr != "" && key == "" {
		return usageError{"--listen needs --api-key (or --api-key-file, or STRATAD_API_KEY): TCP is never served without a key"}
	}
	verify, err := stream.ParseVerifyMode(cmd.String("verify"))
	if err != nil {
		return usageError{"--verify: " + err.Error()}
	}
	srv, err := daemon.New(daemon.Config{
		Verify:      verify,
		ModelDirs:   cmd.StringSlice("model-dir"),
		AdminGroup:  cmd.String("admin-group"),
		APIKey:      key,
		CORSOrigins: cmd.StringSlice("cors-origin"),
		Limits: daemon.Limits{
			MaxBodyBytes: cmd.Int64("max-body-bytes"), MaxPromptTokens: int(cmd.Int("max-prompt-tokens")),
			MaxTokens: int(cmd.Int("max-tokens")), MaxQueue: int(cmd.Int("max-queue")), MaxBatch: int(cmd.Int("max-batch")),
		},
		Conn: daemon.ConnLimits{
			ReadHeaderTimeout: cmd.Duration("read-header-timeout"), ReadTimeout: cmd.Duration("read-timeout"),
			WriteTimeout: cmd.Duration("write-timeout"), IdleTimeout: cmd.Duration("idle-timeout"),
			MaxConns: int(cmd.Int("max-conns")), MaxConnsPerPeer: int(cmd.Int("max-conns-per-peer")),
			MaxRequestsPerPeer: int(cmd.Int("max-requests-per-peer")),
		},
		ShutdownTimeout: cmd.Duration("shutdown-timeout"),
		Backend:         cmd.String("backend"),
		Log:             log,
	})
	if err != nil {
		return usageError{err.Error()}
	}
	defer srv.CloseDevices() // after Serve: shut down the NVMe controllers bound through the device API
	if cmd.Bool("block-trace") {
		srv.StartBlockTrace()
	}

	// Models first, so the socket only appears once there is something
	// to serve and systemd's READY means ready.
	models := cmd.StringSlice("model")
	if cmd.Bool("default-model") {
		p, created, err := synth.DefaultPath()
		if err != nil {
			return err
		}
		if created {
			log.Info("wrote the default model", "path", p)
		}
		models = append(models, p)
	}
	load := api.LoadRequest{Context: int(cmd.Int("ctx")), Depth: int(cmd.Int("depth")), Tiers: cmd.String("tiers"),
		Draft: cmd.String("draft"), Lookup: cmd.Bool("lookup"), SelfDraft: int(cmd.Int("self-draft")), SkipLayers: cmd.String("skip-layers")}
	if load.Context < 0 || load.Depth < 0 {
		srv.Close()
		return usageError{"--ctx and --depth must not be negative"}
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"vram", &load.Budgets.VRAMBytes}, {"ram", &load.Budgets.RAMBytes}} {
		if v := cmd.String(f.name); v != "" {
			n, err := tier.ParseBytes(v)
			if err == nil && n <= 0 {
				err = errors.New("must be positive")
			}
			if err != nil {
				srv.Close()
				return usageError{fmt.Sprintf("--%s: %v", f.name, err)}
			}
			*f.dst = n
		}
	}
	unixLs, tcpLs, err := listen.Systemd()
	if err != nil {
		srv.Close()
		return err
	}
	if len(unixLs)+len(tcpLs) > 0 {
		log.Info("using sockets from systemd", "unix", len(unixLs), "tcp", len(tcpLs))
	} else {
		gid := socketGID(log, cmd.String("socket-group"))
		l, err := listen.Unix(cmd.String("socket"), fs.FileMode(mode), gid)
		if err != nil {
			srv.Close()
			return err
		}
		unixLs = append(unixLs, l)
	}
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			srv.Close()
			for _, u := range unixLs {
				u.Close()
			}
			return fmt.Errorf("listening on %s: %w", addr, err)
		}
		if host, _, _ := net.SplitHostPort(addr); !isLoopback(host) {
			log.Warn("TCP listener is not on loopback; anyone who can reach it and knows the key can run inference", "addr", addr)
		}
		tcpLs = append(tcpLs, l)
	}
	if len(tcpLs) > 0 && key == "" {
		srv.Close()
		return usageError{"systemd passed a TCP socket but no API key is configured"}
	}

	// The sockets are taken before any model loads, so a live socket or a
	// port in use fails at once rather than after a long load; clients
	// that connect meanwhile wait in the listen queue until it is done.
	closeListeners := func() {
		for _, l := range append(append([]net.Listener(nil), unixLs...), tcpLs...) {
			l.Close()
		}
	}
	for _, m := range models {
		name, path := "", m
		if n, p, ok := strings.Cut(m, "="); ok && n != "" && !strings.ContainsRune(n, '/') {
			name, path = n, p
		}
		req := load
		req.Name = name
		var err error
		if daemon.IsVolumeRef(path) {
			// A pool on a strata volume: the daemon binds the controller
			// if it does not hold it yet (the operator asked for it).
			_, err = srv.LoadVolume(ctx, path, req, true)
		} else {
			_, err = srv.LoadFile(ctx, path, req)
		}
		if err != nil {
			closeListeners()
			srv.Close()
			return fmt.Errorf("loading %s: %w", path, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go watchdog(ctx, log)
	notify(log, sddaemon.SdNotifyReady)
	log.Info("stratad ready", "pid", os.Getpid(), "version", buildinfo.Version)
	err = srv.Serve(ctx, unixLs, tcpLs)
	notify(log, sddaemon.SdNotifyStopping)
	log.Info("stratad stopped")
	return err
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// socketGID resolves --socket-group; -1 (keep the daemon's group) when it
// is empty or does not exist.
func socketGID(log hclog.Logger, group string) int {
	if group == "" {
		return -1
	}
	if gid, err := strconv.Atoi(group); err == nil {
		return gid
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		log.Warn("socket group not found; the socket keeps the daemon's group", "group", group)
		return -1
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1
	}
	return gid
}

func notify(log hclog.Logger, state string) {
	sent, err := sddaemon.SdNotify(false, state)
	if err != nil {
		log.Warn("sd_notify failed", "state", state, "error", err)
	} else if sent {
		log.Debug("sd_notify", "state", state)
	}
}

// watchdog pings systemd's watchdog at half its interval when enabled.
func watchdog(ctx context.Context, log hclog.Logger) {
	every, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil || every <= 0 {
		return
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			notify(log, sddaemon.SdNotifyWatchdog)
		}
	}
}

func newLogger(level, format string) (hclog.Logger, error) {
	lv := hclog.LevelFromString(level)
	if lv == hclog.NoLevel {
		return nil, usageError{fmt.Sprintf("--log-level %q: use trace, debug, info, warn or error", level)}
	}
	var js bool
	switch format {
	case "auto":
		js = !term.IsTerminal(int(os.Stderr.Fd()))
	case "json":
		js = true
	case "text":
	default:
		return nil, usageError{fmt.Sprintf("--log-format %q: use auto, json or text", format)}
	}
	return hclog.New(&hclog.LoggerOptions{Name: "stratad", Level: lv, Output: os.Stderr, JSONFormat: js}), nil
}
