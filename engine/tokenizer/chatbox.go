package tokenizer

// A chat template comes from the model file, so whoever can place a model
// can make it recurse without end, loop for hours or double a string until
// memory runs out. The Jinja engine offers no limits of its own, and Go's
// answer to a blown stack or an exhausted heap is a fatal error that no
// recover catches: rendered in the daemon, such a template would kill it on
// a user's first chat request. So templates are compiled and rendered in a
// child process (this same binary, re-executed with workerEnv set) whose
// stack, heap, output, range() sizes and wall time are bounded; a worker
// that breaks a limit dies or is killed, the caller gets a *LimitError
// naming the limit, and the next render starts a fresh worker. Workers are
// kept between renders, so a render costs a round trip over a pipe, not a
// process start.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
	"golang.org/x/sys/unix"
)

// ChatLimits bound what rendering one chat template may use.
type ChatLimits struct {
	// Time is the wall time of one render.
	Time time.Duration
	// Memory is the heap the rendering process may hold.
	Memory int64
	// Stack is the goroutine stack the renderer may grow to: it bounds
	// recursion (a macro that calls itself), which has no other limit.
	Stack int
	// Output is the most text one render may produce.
	Output int
	// Range is the most items one range() call may produce, which bounds
	// loops over ranges (loops over the conversation are bounded by it).
	Range int
}

// DefaultChatLimits are far above what real templates need (a few KiB of
// stack, a few list items per message, milliseconds) and far below what
// would hurt the host.
var DefaultChatLimits = ChatLimits{
	Time:   5 * time.Second,
	Memory: 256 << 20,
	Stack:  16 << 20,
	Output: 16 << 20,
	Range:  100_000,
}

// LimitError is a template that broke one of its ChatLimits.
type LimitError struct {
	// Limit names the limit: "recursion", "loop", "output", "memory" or
	// "time".
	Limit string
	// Detail says what the limit is.
	Detail string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("tokenizer: chat template exceeds the %s limit (%s)", e.Limit, e.Detail)
}

// errWorker marks a worker that died without breaking a known limit.
var errWorker = errors.New("tokenizer: chat template worker failed")

// workerEnv marks a process started as a template worker; its value is
// the limits, as JSON.
const workerEnv = "STRATA_CHAT_TEMPLATE_WORKER"

// init turns this process into a template worker when its parent started
// it as one. It runs before main (and before a test binary's TestMain), so
// every binary that links the tokenizer can serve as its own worker.
func init() {
	spec, ok := os.LookupEnv(workerEnv)
	if !ok {
		return
	}
	var lim ChatLimits
	if err := json.Unmarshal([]byte(spec), &lim); err != nil {
		fmt.Fprintf(os.Stderr, "chat template worker: bad limits: %v\n", err)
		os.Exit(2)
	}
	os.Exit(serveWorker(lim, os.Stdin, os.Stdout, os.Stderr))
}

// renderRequest is one render, as sent to a worker.
type renderRequest struct {
	Template   string
	Messages   []Message
	Generation bool
	Tools      json.RawMessage
	ToolChoice json.RawMessage
	BOS, EOS   string
}

// renderReply is a worker's answer.
type renderReply struct {
	Out     string
	Err     string
	Compile bool   // Err is the template's compile error
	Limit   string // Err is a LimitError for this limit
	Detail  string
}

// orphanExit is a worker's exit code when its own timer ended a render
// that ran past twice the time limit.
const orphanExit = 4

// memoryMarker is what a worker writes to stderr before exiting over its
// heap limit, for the parent to name the limit.
const memoryMarker = "chat template worker: heap over its limit"

func serveWorker(lim ChatLimits, in io.Reader, out, errOut io.Writer) int {
	debug.SetMaxStack(lim.Stack)
	if !raceEnabled {
		// The address space bounds a single huge allocation before it is
		// made; the race detector's shadow memory needs terabytes of
		// address space, so under it only the heap watch below applies.
		as := uint64(lim.Memory) + 2<<30 // the binary and the runtime's own reservations
		_ = unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: as, Max: as})
	}
	// The kernel's OOM killer should pick a worker long before the daemon.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	go watchHeap(lim.Memory, errOut)

	templates := map[string]*jinja.Template{}
	compileErrs := map[string]error{}
	dec := json.NewDecoder(bufio.NewReader(in))
	enc := json.NewEncoder(out)
	for {
		var req renderRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			fmt.Fprintf(errOut, "chat template worker: read request: %v\n", err)
			return 2
		}
		tmpl, cerr := templates[req.Template], compileErrs[req.Template]
		if tmpl == nil && cerr == nil {
			if len(templates)+len(compileErrs) > 64 {
				clear(templates) // a worker serves the few templates of its models
				clear(compileErrs)
			}
			tmpl, cerr = jinja.Compile(req.Template)
			if cerr != nil {
				compileErrs[req.Template] = cerr
			} else {
				templates[req.Template] = tmpl
			}
		}
		var rep renderReply
		if cerr != nil {
			rep = renderReply{Err: cerr.Error(), Compile: true}
		} else {
			// The parent kills a render over its time; this bounds one
			// whose parent is gone.
			orphan := time.AfterFunc(2*lim.Time+time.Second, func() { os.Exit(orphanExit) })
			rep = renderOne(tmpl, &req, lim)
			orphan.Stop()
		}
		rep.Err = clip(rep.Err, maxErrText)
		if err := enc.Encode(&rep); err != nil {
			fmt.Fprintf(errOut, "chat template worker: write reply: %v\n", err)
			return 2
		}
	}
}

// watchHeap ends the worker when its heap passes limit: under the race
// detector it is the only memory bound, and elsewhere it ends a worker
// that grows by many small allocations before the address space is full.
func watchHeap(limit int64, errOut io.Writer) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	for {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() > uint64(limit) {
			fmt.Fprintln(errOut, memoryMarker)
			os.Exit(3)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// renderOne renders one request in the worker; a panic in the engine is
// returned as an error.
func renderOne(tmpl *jinja.Template, req *renderRequest, lim ChatLimits) (rep renderReply) {
	defer func() {
		if r := recover(); r != nil {
			rep = renderReply{Err: fmt.Sprintf("chat template engine failed: %v", r)}
		}
	}()
	data, err := templateData(req, lim)
	if err != nil {
		return renderReply{Err: err.Error()}
	}
	out, err := tmpl.RenderValues(data)
	var le *LimitError
	switch {
	case errors.As(err, &le):
		return renderReply{Err: err.Error(), Limit: le.Limit, Detail: le.Detail}
	case err != nil:
		return renderReply{Err: "tokenizer: render chat template: " + err.Error()}
	case len(out) > lim.Output:
		le := outputLimit(lim)
		return renderReply{Err: le.Error(), Limit: le.Limit, Detail: le.Detail}
	}
	return renderReply{Out: out}
}

// maxErrText bounds a render's error message: the engine's messages may
// quote a value or the template, which can be as large as the heap limit,
// and a reply must stay within what the parent reads (replyLimit).
const maxErrText = 2048

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = " [...]"
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// replyLimit is the most bytes a worker's reply may take: the rendered
// text and the error message at JSON's worst (\u00XX for each byte) plus
// the field names.
func replyLimit(lim ChatLimits) int64 {
	return 6*(int64(lim.Output)+maxErrText) + 4096
}

func outputLimit(lim ChatLimits) *LimitError {
	return &LimitError{"output", fmt.Sprintf("%d bytes of rendered text", lim.Output)}
}

// templateData is the variables a template is rendered with.
func templateData(req *renderRequest, lim ChatLimits) (map[string]jinja.Value, error) {
	list := make([]jinja.Value, len(req.Messages))
	for i, m := range req.Messages {
		v, err := messageValue(m)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: chat message %d: %w", i, err)
		}
		list[i] = v
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"add_generation_prompt": jinja.NewBool(req.Generation),
		"bos_token":             jinja.NewString(req.BOS),
		"eos_token":             jinja.NewString(req.EOS),
		// Shadows the engine's range, which builds any list it is asked for.
		"range": jinja.NewCallable("range", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			return boundedRange(args, lim.Range)
		}),
	}
	for name, raw := range map[string]json.RawMessage{"tools": req.Tools, "tool_choice": req.ToolChoice} {
		if len(raw) == 0 || string(raw) == "null" {
			continue // undefined, as templates test for
		}
		v, err := jsonValue(raw)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", name, err)
		}
		data[name] = v
	}
	return data, nil
}

// boundedRange is Python's range(stop), range(start, stop[, step]) as a
// list of at most limit items.
func boundedRange(args []jinja.Value, limit int) (jinja.Value, error) {
	ints := make([]int64, len(args))
	for i, a := range args {
		switch {
		case a.IsInt():
			ints[i] = a.AsInt()
		case a.IsFloat() && !math.IsNaN(a.AsFloat()) && math.Abs(a.AsFloat()) < 1<<62:
			ints[i] = int64(a.AsFloat())
		case a.IsBool():
			if a.AsBool() {
				ints[i] = 1
			}
		default:
			return jinja.Undefined(), fmt.Errorf("range: argument %d is not a number", i+1)
		}
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return jinja.Undefined(), fmt.Errorf("range: expected 1-3 arguments, got %d", len(args))
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step must not be zero")
	}
	var n float64 // in float: stop-start can overflow int64
	if step > 0 && stop > start {
		n = math.Ceil((float64(stop) - float64(start)) / float64(step))
	} else if step < 0 && stop < start {
		n = math.Ceil((float64(start) - float64(stop)) / -float64(step))
	}
	if n > float64(limit) {
		return jinja.Undefined(), &LimitError{"loop", fmt.Sprintf("range() of %.0f items, at most %d", n, limit)}
	}
	items := make([]jinja.Value, int(n))
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}

// chatWorker is one running worker process.
type chatWorker struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *replyReader
	dec    *json.Decoder
	stderr *headWriter
}

// errReplyTooLarge is a reply past replyLimit: the worker broke the
// protocol (its own output check bounds a well-formed reply).
var errReplyTooLarge = errors.New("reply too large")

// replyReader bounds each reply a worker sends, not all it sends over its
// life: the parent resets it before reading each reply.
type replyReader struct {
	r    io.Reader
	left int64
}

func (l *replyReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errReplyTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// workerPool keeps the idle workers of one set of limits; at most
// maxWorkers run at once, so hostile renders cannot fill the host with
// processes.
type workerPool struct {
	lim  ChatLimits
	idle chan *chatWorker
	sem  chan struct{}
}

const maxWorkers = 4

var pools struct {
	sync.Mutex
	m map[ChatLimits]*workerPool
}

func poolFor(lim ChatLimits) *workerPool {
	pools.Lock()
	defer pools.Unlock()
	if pools.m == nil {
		pools.m = map[ChatLimits]*workerPool{}
	}
	p := pools.m[lim]
	if p == nil {
		p = &workerPool{lim: lim, idle: make(chan *chatWorker, maxWorkers), sem: make(chan struct{}, maxWorkers)}
		pools.m[lim] = p
	}
	return p
}

// render renders req in a worker within lim.
func renderSandboxed(req *renderRequest, lim ChatLimits) (string, error) {
	p := poolFor(lim)
	p.sem <- struct{}{}
	defer func() { <-p.sem }()
	var w *chatWorker
	select {
	case w = <-p.idle:
	default:
		var err error
		if w, err = startWorker(lim); err != nil {
			return "", err
		}
	}
	rep, err := w.render(req, lim)
	if err != nil {
		w.kill()
		return "", err
	}
	select {
	case p.idle <- w:
	default:
		w.kill()
	}
	if rep.Limit != "" {
		return "", &LimitError{rep.Limit, rep.Detail}
	}
	if rep.Compile {
		return "", fmt.Errorf("%w: %s", errCompile, rep.Err)
	}
	if rep.Err != "" {
		return "", errors.New(rep.Err)
	}
	return rep.Out, nil
}

func startWorker(lim ChatLimits) (*chatWorker, error) {
	spec, _ := json.Marshal(lim) // plain numbers always marshal
	exe := "/proc/self/exe"      // this very binary, even if its path was replaced since
	if runtime.GOOS != "linux" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("tokenizer: start chat template worker: %w", err)
		}
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{workerEnv + "=" + string(spec), "GOTRACEBACK=none", "GOMAXPROCS=2"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	w := &chatWorker{cmd: cmd, stderr: &headWriter{max: 4096}}
	cmd.Stderr = w.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("tokenizer: start chat template worker: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("tokenizer: start chat template worker: %w", err)
	}
	if err := startLocked(cmd); err != nil {
		return nil, fmt.Errorf("tokenizer: start chat template worker: %w", err)
	}
	// A reply larger than replyLimit is a broken worker: render resets
	// the bound before each reply (json.Decoder buffers by itself, and a
	// worker sends nothing between replies, so no read crosses into the
	// next one).
	w.in, w.out = in, &replyReader{r: out}
	w.dec = json.NewDecoder(w.out)
	return w, nil
}

// The kernel sends a child its Pdeathsig when the thread that forked it
// exits, not the process, and Go ends threads (one whose goroutine exits
// locked to it, as GPU and driver code do): workers are therefore started
// from one thread that never exits, so they die with the daemon and only
// then.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func startLocked(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // for good: this thread is never released
			for r := range spawner.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.done
}

// render sends one request and reads its reply; an error means the worker
// is unusable (it died or ran out of time) and says which limit it broke.
func (w *chatWorker) render(req *renderRequest, lim ChatLimits) (renderReply, error) {
	var timedOut bool
	var mu sync.Mutex
	timer := time.AfterFunc(lim.Time, func() {
		mu.Lock()
		timedOut = true
		mu.Unlock()
		_ = w.cmd.Process.Kill()
	})
	defer timer.Stop()
	var rep renderReply
	w.out.left = replyLimit(lim)
	err := json.NewEncoder(w.in).Encode(req)
	if err == nil {
		err = w.dec.Decode(&rep)
	}
	if err == nil && timer.Stop() {
		return rep, nil
	}
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait() // the stderr tail is complete after Wait
	mu.Lock()
	late := timedOut
	mu.Unlock()
	head := w.stderr.String()
	code := -1
	if ps := w.cmd.ProcessState; ps != nil {
		code = ps.ExitCode()
	}
	switch {
	case errors.Is(err, errReplyTooLarge):
		return rep, &LimitError{"output", fmt.Sprintf("a reply of %d bytes", replyLimit(lim))}
	case late || code == orphanExit:
		// The worker's own timer (orphanExit) ends a render the parent's
		// timer missed, as on a starved machine.
		return rep, &LimitError{"time", fmt.Sprintf("%v per render", lim.Time)}
	case strings.Contains(head, "stack exceeds") || strings.Contains(head, "stack overflow"):
		return rep, &LimitError{"recursion", fmt.Sprintf("%d MiB of stack", lim.Stack>>20)}
	case strings.Contains(head, memoryMarker) || strings.Contains(head, "out of memory") ||
		strings.Contains(head, "cannot allocate memory"):
		return rep, &LimitError{"memory", fmt.Sprintf("%d MiB of heap", lim.Memory>>20)}
	}
	state := "still running"
	if ps := w.cmd.ProcessState; ps != nil {
		state = ps.String()
	}
	return rep, fmt.Errorf("%w: %w (%s; %s)", errWorker, err, state, firstLine(head))
}

func (w *chatWorker) kill() {
	_ = w.in.Close()
	_ = w.cmd.Process.Kill()
	go func() { _ = w.cmd.Wait() }()
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "no message"
	}
	return strconv.Quote(s)
}

// headWriter keeps the first max bytes written to it: a dying worker's
// first lines say why it died.
type headWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *headWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *headWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// probeTools is a tool list like those clients send, for ProbeChatTemplate.
const probeTools = `[{"type":"function","function":{"name":"get_weather","description":"Current weather of a city.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`

// ProbeChatTemplate renders the vocabulary's chat template, within its
// limits, over representative conversations (a system prompt, user and
// assistant turns, a tool call and its result, with and without tools),
// so that a template that breaks a limit is refused when its model loads
// rather than failing a user's request. Only a broken limit or a worker
// that dies is an error: a template may refuse a conversation shape (a
// system turn, a tool turn) on purpose, and such refusals reach the
// client as they do today.
func (t *Tokenizer) ProbeChatTemplate() error {
	if t.ChatFormat() == ChatPlain {
		return nil
	}
	chat := []Message{
		{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: "Hello, who are you?"},
		{Role: "assistant", Content: "I am an assistant."},
		{Role: "user", Content: "What is the weather in Paris?"},
	}
	withCall := append(slices.Clone(chat),
		Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "call0", Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		Message{Role: "tool", ToolCallID: "call0", Name: "get_weather", Content: `{"temperature":21}`})
	probes := []struct {
		msgs []Message
		opt  ChatOptions
	}{
		{chat, ChatOptions{AddGenerationPrompt: true}},
		{chat[1:], ChatOptions{AddGenerationPrompt: false}},
		{withCall, ChatOptions{AddGenerationPrompt: true, Tools: json.RawMessage(probeTools)}},
	}
	for _, p := range probes {
		_, err := t.chatJinja(p.msgs, p.opt)
		var le *LimitError
		if errors.As(err, &le) || errors.Is(err, errWorker) {
			return fmt.Errorf("chat template refused: %w", err)
		}
	}
	return nil
}
