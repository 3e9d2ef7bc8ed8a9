package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/tier"
	"github.com/strata-llm/strata/kernels"
	"github.com/strata-llm/strata/kernels/cudadrv"
)

// activations are the device buffers of one pass, sized for capT tokens
// and capR logit rows; they grow on demand (which invalidates captured
// graphs, whose launches hold their addresses).
type activations struct {
	capT, capR                               int
	h, xn, q, k, v, att, tmp, gate, up, meta cudadrv.DevPtr
	outX, logits, tokens                     cudadrv.DevPtr
	metaHost, logitsHost, tokensHost         *cudadrv.HostMem
	metaMapped                               cudadrv.DevPtr // metaHost's device address
	// fx is two sets of Dim fixed-point accumulators, in turn by layer,
	// which a one-token down product by column slices adds into
	// (kernels.GEMVSliced; Model.down) for the residual update to add
	// (kernels.AddFixed, AddFixedRMSNormQ). Zero between passes (see
	// fixedState); zeroed once here.
	fx cudadrv.DevPtr
}

func (a *activations) free(c *cudadrv.Ctx) {
	for _, p := range []cudadrv.DevPtr{a.h, a.xn, a.q, a.k, a.v, a.att, a.tmp, a.gate, a.up, a.meta, a.outX, a.logits, a.tokens, a.fx} {
		c.Free(p)
	}
	c.FreeHost(a.metaHost)
	c.FreeHost(a.logitsHost)
	c.FreeHost(a.tokensHost)
	*a = activations{}
}

// ensure grows the buffers to hold T tokens and R logit rows. It reports
// whether anything was reallocated.
func (m *Model) ensure(c *cudadrv.Ctx, T, R int) (bool, error) {
	a := &m.act
	if T <= a.capT && R <= a.capR {
		return false, nil
	}
	cfg := &m.Config
	T, R = max(T, a.capT), max(R, a.capR)
	m.dropGraphs(c)
	a.free(c)
	var err error
	alloc := func(p *cudadrv.DevPtr, n int64) {
		if err == nil {
			*p, err = c.Alloc(max(n, 256))
		}
	}
	f := int64(4)
	t := int64(T)
	alloc(&a.h, t*int64(cfg.Dim)*f)
	alloc(&a.xn, t*int64(cfg.Dim)*f)
	alloc(&a.q, t*int64(cfg.QDim())*f)
	alloc(&a.k, t*int64(cfg.KVDim())*f)
	alloc(&a.v, t*int64(cfg.KVDim())*f)
	alloc(&a.att, t*int64(cfg.QDim())*f)
	alloc(&a.tmp, t*int64(cfg.Dim)*f)
	alloc(&a.gate, t*int64(cfg.FFN)*f)
	alloc(&a.up, t*int64(cfg.FFN)*f)
	alloc(&a.fx, 2*kernels.GEMVFixedBytes(cfg.Dim))
	if err == nil {
		err = c.MemsetD8(a.fx, 0, 2*kernels.GEMVFixedBytes(cfg.Dim), m.stream)
	}
	alloc(&a.meta, 3*t*4)
	alloc(&a.outX, int64(R)*int64(cfg.Dim)*f)
	alloc(&a.logits, int64(R)*int64(cfg.Vocab)*f)
	alloc(&a.tokens, int64(R)*4)
	if err == nil {
		a.metaHost, err = c.HostAlloc(3*T*4, cudadrv.HostAllocDeviceMap)
	}
	if err == nil {
		a.metaMapped, err = c.HostDevicePointer(a.metaHost)
	}
	if err == nil {
		a.logitsHost, err = c.HostAlloc(R*cfg.Vocab*4, 0)
	}
	if err == nil {
		a.tokensHost, err = c.HostAlloc(R*4, 0)
	}
	if err != nil {
		a.free(c)
		return true, fmt.Errorf("activations for %d tokens, %d logit rows: %w", T, R, err)
	}
	a.capT, a.capR = T, R
	return true, nil
}

// attnRun is one attention launch: a prompt chunk of one sequence
// (prefill) or a run of consecutive single-token steps (decode).
type attnRun struct {
	t0, n   int
	prefill bool
	slot    int // prefill
	p0      int // prefill
	span    int // decode: largest position+1 of the run
}

// outRun is a range of tokens whose logits are wanted, landing at logit
// row r0.
type outRun struct{ t0, n, r0 int }

// pass is the host-side plan of one forward pass.
type pass struct {
	T, R   int
	attn   []attnRun
	out    []outRun
	decode bool // every step is one token wanting its logits
	// sel selects each logit row's greedy token on the device (every step
	// asked for Greedy and none for AllLogits): the pass downloads R token
	// ids instead of R logit rows.
	sel    bool
	maxPos int
	// graphSpan, when > 0, is the fixed key span decode attention is
	// launched for (graph capture); 0 sizes it to the batch.
	graphSpan int
	// exit, when > 0, ends the layers there: the pass runs layers
	// [0, exit), all resident, then the output head (ForwardExit).
	exit int
	// trace is told TraceStarted and TraceLayers by a pass issued kernel
	// by kernel (nil in a graph's capture: a replay reaches neither).
	trace Tracer
}

// own accepts, for model.CheckBatch, the open sequences this model made.
func (m *Model) own(q model.Seq) error {
	s, ok := q.(*Sequence)
	switch {
	case !ok || s == nil:
		return errors.New("the sequence belongs to another backend")
	case s.m != m:
		return errors.New("sequence belongs to another model")
	case !s.open:
		return model.ErrSequenceClosed
	}
	return nil
}

// planPass lays the batch's tokens out in step order and groups the
// attention launches and logit rows.
func planPass(batch []model.Step) pass {
	var p pass
	p.decode, p.sel = true, true
	for i := range batch {
		st := &batch[i]
		n := len(st.Tokens)
		s := st.Seq.(*Sequence)
		if !st.Greedy || st.AllLogits {
			p.sel = false
		}
		if n == 1 {
			if k := len(p.attn) - 1; k >= 0 && !p.attn[k].prefill && p.attn[k].t0+p.attn[k].n == p.T {
				p.attn[k].n++
				p.attn[k].span = max(p.attn[k].span, s.pos+1)
			} else {
				p.attn = append(p.attn, attnRun{t0: p.T, n: 1, span: s.pos + 1})
			}
		} else {
			p.attn = append(p.attn, attnRun{t0: p.T, n: n, prefill: true, slot: s.slot, p0: s.pos})
		}
		first := n - 1
		if st.AllLogits {
			first = 0
		}
		if n != 1 || st.AllLogits {
			p.decode = false
		}
		t := p.T + first
		if k := len(p.out) - 1; k >= 0 && p.out[k].t0+p.out[k].n == t {
			p.out[k].n += n - first
		} else {
			p.out = append(p.out, outRun{t0: t, n: n - first, r0: p.R})
		}
		p.R += n - first
		p.maxPos = max(p.maxPos, s.pos+n-1)
		p.T += n
	}
	return p
}

// Forward advances every sequence of the batch by its step's tokens in one
// pass over the layers on the GPU and fills each step's Logits (or, for a
// pass whose every step asks for Greedy, only each step's Token), with
// engine/model.Forward's contract: the batch is checked by
// model.CheckBatch before anything changes (a bad token, a closed or
// foreign sequence, a sequence listed twice, or ErrContextOverflow leave
// every sequence untouched);
// cancellation is checked between layers while the pass is being
// enqueued; a cancelled or failed pass leaves every sequence at its old
// position. A pure decode step of up to eight sequences is replayed from a
// captured CUDA graph (unless Options.NoGraphs), and is then not
// cancellable once started (it takes milliseconds).
func (m *Model) Forward(ctx context.Context, batch []model.Step) error {
	return m.forward(ctx, batch, 0)
}

// ForwardExit is Forward through the first exit layers only, then
// straight to the output norm and head: the model drafting for itself
// (an early exit). Those layers must be resident (ResidentPrefix); the
// KV-cache entries it writes for them are the ones a full pass writes
// for the same tokens, and the layers past exit get none.
func (m *Model) ForwardExit(ctx context.Context, batch []model.Step, exit int) error {
	if exit < 1 || exit >= len(m.layers) {
		return fmt.Errorf("forward: early exit after %d of %d layers", exit, len(m.layers))
	}
	if r := m.ResidentPrefix(); exit > r {
		return fmt.Errorf("forward: early exit after %d layers: only the first %d are resident", exit, r)
	}
	return m.forward(ctx, batch, exit)
}

// ResidentPrefix is how many of the first layers are resident in device
// memory (all of them without streaming): what an early exit may use.
func (m *Model) ResidentPrefix() int {
	if m.tb == nil || m.tb.pipe == nil {
		return len(m.layers)
	}
	for l, t := range m.tb.pipe.Tiers() {
		if t != tier.TierA {
			return l
		}
	}
	return len(m.layers)
}

func (m *Model) forward(ctx context.Context, batch []model.Step, exit int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("forward: model closed")
	}
	if err := model.CheckBatch(batch, m.Config.Vocab, m.own); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	tr := m.fw.trace
	mark(tr, TraceEnter)
	p := planPass(batch)
	p.exit = exit
	useGraph := !m.opts.NoGraphs && m.tb == nil && m.moe == nil && p.decode && p.T <= kernels.MaxGEMVBatch && exit == 0
	// Experts in device memory: this batch size's way (moechoice.go).
	trial := m.moe != nil && exit == 0 && m.moe.stats.ResidentExperts > 0 && !m.opts.NoExpertTrial
	if trial {
		m.moe.cpuOnly = !m.moe.choice.device(p.T)
	}
	// Mapped experts: whether this pass's tables give the GPU the experts
	// it does not hold to pull (moemapped.go). Always on, they serve the
	// passes the GPU takes part in, as the resident experts' way decides;
	// by trial, a pass that pulls is the GPU's, whatever that way is.
	pull, pullTrial := false, false
	if m.moe != nil && exit == 0 {
		pull, pullTrial = m.moe.mappedPass(p.T, trial, m.opts.NoExpertTrial)
		if pull && m.moe.mapWay == MappedTrial {
			m.moe.cpuOnly = false
		}
	}
	start := time.Now()
	// A pass that may put the host's threads to work waits for them
	// asleep: this goroutine polling would hold a core they need.
	do := m.dev.Do
	if m.hostWork() {
		do = m.dev.DoSleeping
	}
	err := do(func(c *cudadrv.Ctx) error {
		mark(tr, TraceDevice)
		if _, err := m.ensure(c, p.T, p.R); err != nil {
			return err
		}
		if m.moe != nil && exit == 0 {
			if err := m.moe.pullMapped(c, m.stream, pull); err != nil {
				return err
			}
		}
		m.writeMeta(batch, p.T)
		var err error
		if useGraph {
			err = m.replayDecode(c, &p)
		} else {
			p.trace = tr
			err = m.copyMeta(c, &p)
			if err == nil {
				err = m.enqueue(ctx, c, &p)
			}
			if err == nil {
				err = m.copyOut(c, &p)
			}
		}
		mark(tr, TraceQueued)
		// Always drain the stream: the pinned buffers are reused by the
		// next pass and a failed pass must not leave work in flight.
		if serr := m.wait(c); err == nil {
			err = serr
		}
		mark(tr, TraceSynced)
		if m.tb != nil {
			if serr := m.tb.end(c, err != nil); err == nil {
				err = serr
			}
		}
		return err
	})
	mark(tr, TraceBack)
	if trial {
		if err == nil {
			m.moe.choice.record(p.T, !m.moe.cpuOnly, time.Since(start))
		}
		m.moe.cpuOnly = false
	}
	if pullTrial && err == nil {
		m.moe.choice.mappedTrial().Record(1, !pull, time.Since(start))
	}
	if err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	if p.sel {
		m.scatterTokens(batch)
	} else {
		m.scatterLogits(batch)
	}
	for i := range batch {
		batch[i].Seq.(*Sequence).pos += len(batch[i].Tokens)
	}
	m.stats.Passes++
	if tr != nil {
		tr.Mark(TraceEnd)
		tr.Done(m.passTrace(useGraph, p.sel))
	}
	return nil
}

// forwardState is Forward's host-side state besides the activations.
type forwardState struct {
	// noGraphCopies is set (to the capture error) when capturing a decode
	// step with its input and output copies inside the graph failed; later
	// captures leave the copies outside.
	noGraphCopies error
	// trace, when a benchmark set one (SetTracer), is told the points
	// of every pass (trace.go).
	trace Tracer
}

// passTuning is how a model enqueues its passes where two ways compute
// the same results. Every model gets defaultPassTuning; tests and
// benchmarks change their own model's to check or measure what the
// defaults buy.
type passTuning struct {
	// graphCopies puts a decode step's copies into its captured graph:
	// the upload of the token ids, positions and slots from pinned memory
	// before the first kernel and the download of the logits (or token
	// ids) after the last, so a step costs the host one graph launch and
	// one wait instead of two more copy calls.
	graphCopies bool
	// fuseGEMV launches q, k and v in one GEMV launch and gate and up with
	// their activation in another (passes of up to
	// kernels.MaxFusedGEMVBatch tokens); fuseElementwise fuses RoPE with
	// the KV store and residual adds with the next RMSNorm (any pass). The
	// results agree to float32 rounding of the GEMV sums.
	fuseGEMV, fuseElementwise bool
	// slicedDown takes a one-token pass's down products by column slices
	// where the kernels take them (kernels.GEMVSliced): no launch of its
	// own to quantize down's x, and sums that are the same bits every run.
	slicedDown bool
}

var defaultPassTuning = passTuning{graphCopies: true, fuseGEMV: true, fuseElementwise: true, slicedDown: true}

// wait blocks until the model's stream is drained.
func (m *Model) wait(c *cudadrv.Ctx) error { return c.StreamSync(m.stream) }

// copyMeta uploads the pass's token ids, positions and slots (writeMeta's
// pinned buffer) to the device.
//
// With layers streaming it is a kernel reading the mapped buffer, not a
// copy: the copy stream may still be moving the layers the pass before
// carried over, and a small copy on the compute stream can wait behind
// such bulk copies (the hybrid hand-over's reason, hybrid.go's cpuFFN).
func (m *Model) copyMeta(c *cudadrv.Ctx, p *pass) error {
	if m.tb != nil {
		return m.k.Copy(c, m.stream, m.act.meta, m.act.metaMapped, int64(3*p.T))
	}
	return c.CopyHtoD(m.act.meta, m.act.metaHost.Bytes()[:12*p.T], m.stream)
}

// copyOut downloads the pass's result into pinned memory: R token ids when
// it selects on the device, else R logit rows.
func (m *Model) copyOut(c *cudadrv.Ctx, p *pass) error {
	if p.sel {
		return c.CopyDtoH(m.act.tokensHost.Bytes()[:4*p.R], m.act.tokens, m.stream)
	}
	n := int64(p.R) * int64(m.Config.Vocab) * 4
	return c.CopyDtoH(m.act.logitsHost.Bytes()[:n], m.act.logits, m.stream)
}

// scatterTokens hands each step its device-selected token (a selecting
// pass has one row per step).
func (m *Model) scatterTokens(batch []model.Step) {
	toks, _ := cudadrv.Values[int32](m.act.tokensHost.Bytes()[:4*len(batch)])
	for i := range batch {
		batch[i].Token = toks[i]
	}
}

// writeMeta fills the pinned meta buffer: token ids, positions and cache
// slots, T int32 each.
func (m *Model) writeMeta(batch []model.Step, T int) {
	meta, _ := cudadrv.Values[int32](m.act.metaHost.Bytes()[:12*T])
	ids, pos, slots := meta[:T], meta[T:2*T], meta[2*T:3*T]
	t := 0
	for i := range batch {
		st := &batch[i]
		s := st.Seq.(*Sequence)
		for j, id := range st.Tokens {
			ids[t] = id
			pos[t] = int32(s.pos + j)
			slots[t] = int32(s.slot)
			t++
		}
	}
}

// scatterLogits copies the downloaded logit rows into the steps.
func (m *Model) scatterLogits(batch []model.Step) {
	V := m.Config.Vocab
	all, _ := cudadrv.Values[float32](m.act.logitsHost.Bytes())
	r := 0
	for i := range batch {
		st := &batch[i]
		n := len(st.Tokens)
		rows := 1
		if st.AllLogits {
			rows = n
		}
		if len(st.Logits) != rows {
			st.Logits = make([][]float32, rows)
		}
		for j := range st.Logits {
			if len(st.Logits[j]) != V {
				st.Logits[j] = make([]float32, V)
			}
			copy(st.Logits[j], all[r*V:(r+1)*V])
			r++
		}
	}
}

// enqueue issues one pass's kernels on the model's stream: embeddings,
// every layer, the output norm and projection. ctx may be nil (graph
// capture).
func (m *Model) enqueue(ctx context.Context, c *cudadrv.Ctx, p *pass) error {
	var fx fixedState
	err := m.enqueuePass(ctx, c, p, &fx)
	if serr := m.settleFixed(c, m.stream, &fx, err != nil); err == nil {
		err = serr
	}
	return err
}

// fixedState follows, while a pass is enqueued, which of the two sets of
// fixed-point accumulators (activations.fx) may hold a product: set by a
// residual update that reads them without zeroing them
// (AddFixedRMSNormQ), cleared by the next sliced down product, which
// zeroes the other set as it runs, and by AddFixed. Every pass starts and
// ends with both zero (settleFixed), so a captured step replays from
// zeros.
type fixedState struct {
	used  bool
	dirty [2]bool
}

// settleFixed zeroes, on s, the accumulators fx says may hold a product;
// after a failed pass that used them, both sets.
func (m *Model) settleFixed(c *cudadrv.Ctx, s cudadrv.Stream, fx *fixedState, failed bool) error {
	n := kernels.GEMVFixedBytes(m.Config.Dim)
	for b := range fx.dirty {
		if fx.dirty[b] || (failed && fx.used) {
			if err := c.MemsetD8(m.act.fx.Add(int64(b)*n), 0, n, s); err != nil {
				return fmt.Errorf("zeroing the fixed-point accumulators: %w", err)
			}
			fx.dirty[b] = false
		}
	}
	return nil
}

func (m *Model) enqueuePass(ctx context.Context, c *cudadrv.Ctx, p *pass, fx *fixedState) error {
	cfg := &m.Config
	k, s, a := m.k, m.stream, &m.act
	T := p.T
	f := int64(4)
	dim, qd, kvd, ffn := int64(cfg.Dim), int64(cfg.QDim()), int64(cfg.KVDim()), int64(cfg.FFN)
	ids, pos, slots := a.meta, a.meta.Add(int64(T)*4), a.meta.Add(2*int64(T)*4)
	// gemma: post-norms and GeGLU (Gemma 2 and 3); neox: RoPE pairs
	// (x[i], x[i+HeadDim/2]), every architecture but llama.
	gemma, neox := cfg.PostNorms(), cfg.NeoX()
	eps := cfg.NormEps
	// LongRoPE's attention factor multiplies the cosines and sines of q
	// and k alike: the scores grow by its square, which the attention
	// scale carries (the cached keys stay unscaled).
	scale := cfg.AttnScale
	if af := cfg.RopeAttnFactor; af != 0 && af != 1 {
		scale *= af * af
	}

	if err := k.Embed(c, s, m.embed, ids, T, a.h, cfg.EmbedScale); err != nil {
		return err
	}
	streaming := m.tb != nil && p.exit == 0
	if m.hy != nil && p.exit == 0 {
		if err := m.hy.apply(m.tb, T); err != nil {
			return err
		}
	}
	if streaming {
		if err := m.tb.begin(ctx, c); err != nil {
			return err
		}
	}
	mark(p.trace, TraceStarted)
	cpuPass := false
	normed := false // a.xn already holds this layer's attention norm
	last := len(m.layers)
	if p.exit > 0 {
		last = p.exit
	}
	for l := range last {
		if ctx != nil {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("cancelled before layer %d: %w", l, err)
			}
		}
		lw := m.layers[l]
		step := func(what string, err error) error {
			if err != nil {
				return fmt.Errorf("layer %d %s: %w", l, what, err)
			}
			return nil
		}
		if streaming {
			lws, inSlot, err := m.tb.acquire(l, lw)
			if err != nil {
				return step("waiting for its copy", err)
			}
			if inSlot {
				lw = lws
				if err := step("unpacking q, k, v, o", m.unpack(c, s, l, &lw, unpackAttn)); err != nil {
					return err
				}
			}
		}
		if !normed {
			if err := step("attention norm", k.RMSNormQ(c, s, a.h, lw.attnNorm, a.xn, T, cfg.Dim, eps)); err != nil {
				return err
			}
		}
		normed = false
		if err := step("qkv", m.qkv(c, s, &lw, T)); err != nil {
			return err
		}
		if err := step("q, k, v biases and norms", m.qkvExtras(c, s, &lw, T)); err != nil {
			return err
		}
		kv := kernels.KVCache{K: m.kvK[l], V: m.kvV[l], MaxCtx: m.maxCtx, KVDim: cfg.KVDim()}
		at := kernels.Attention{Heads: cfg.Heads, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim, Scale: scale, Softcap: cfg.AttnSoftcap}
		freqs := m.freqs
		if cfg.Sliding(l) {
			at.Window = cfg.SlidingWindow
			if m.freqsLocal != 0 {
				freqs = m.freqsLocal
			}
		}
		if m.pass.fuseElementwise {
			if err := step("rope and kv store", k.RoPEStore(c, s, at, kv, a.q, a.k, a.v, T, int(qd), pos, slots, freqs, neox)); err != nil {
				return err
			}
		} else {
			if err := step("rope q", k.RoPE(c, s, a.q, T, cfg.Heads, cfg.HeadDim, int(qd), pos, freqs, neox)); err != nil {
				return err
			}
			if err := step("rope k", k.RoPE(c, s, a.k, T, cfg.KVHeads, cfg.HeadDim, int(kvd), pos, freqs, neox)); err != nil {
				return err
			}
			if err := step("store kv", k.StoreKV(c, s, kv, a.k, a.v, T, slots, pos)); err != nil {
				return err
			}
		}
		for _, r := range p.attn {
			qo, ao := a.q.Add(int64(r.t0)*qd*f), a.att.Add(int64(r.t0)*qd*f)
			var err error
			if r.prefill {
				err = k.AttentionPrefill(c, s, at, kv, qo, ao, r.n, r.slot, r.p0)
			} else {
				// The split layout depends only on the token count and the
				// span, so a captured launch (span fixed to its bucket)
				// stays valid while positions stay below it.
				span := r.span
				if p.graphSpan > 0 {
					span = p.graphSpan
				}
				err = k.AttentionDecodeQ(c, s, at, kv, qo, ao, r.n, slots.Add(int64(r.t0)*4), pos.Add(int64(r.t0)*4),
					span, 0, m.scratch, m.scratchN)
			}
			if err := step("attention", err); err != nil {
				return err
			}
		}
		if err := step("o", k.MatMul(c, s, lw.o, a.att, a.tmp, T)); err != nil {
			return err
		}
		if m.hy != nil && m.hy.on[l] || m.moe != nil {
			// The CPU takes the FFN (hybrid.go), or the experts' own
			// placement does (moe.go): a slot held only the attention
			// (and the FFN norm), so it goes back before the FFN starts.
			if gemma {
				if err := step("post-attention norm", k.RMSNorm(c, s, a.tmp, lw.postAttnNorm, a.tmp, T, cfg.Dim, eps)); err != nil {
					return err
				}
			}
			if err := step("residual", k.Add(c, s, a.h, a.tmp, int64(T)*dim)); err != nil {
				return err
			}
			if m.moe != nil {
				// The router reads the FFN norm's output: normed while
				// the layer's slot still holds the norm's weights.
				if err := step("ffn norm", k.RMSNorm(c, s, a.h, lw.ffnNorm, a.xn, T, cfg.Dim, eps)); err != nil {
					return err
				}
			}
			if streaming {
				if err := step("releasing its slot", m.tb.done(l)); err != nil {
					return err
				}
			}
			if m.moe != nil {
				if err := step("experts", m.moeFFN(ctx, c, l, T)); err != nil {
					return err
				}
				continue
			}
			if err := step("ffn on the CPU", m.cpuFFN(ctx, c, l, T)); err != nil {
				return err
			}
			cpuPass = true
			continue
		}
		if gemma || !m.pass.fuseElementwise {
			if gemma {
				if err := step("post-attention norm", k.RMSNorm(c, s, a.tmp, lw.postAttnNorm, a.tmp, T, cfg.Dim, eps)); err != nil {
					return err
				}
			}
			if err := step("residual", k.Add(c, s, a.h, a.tmp, int64(T)*dim)); err != nil {
				return err
			}
			if err := step("ffn norm", k.RMSNormQ(c, s, a.h, lw.ffnNorm, a.xn, T, cfg.Dim, eps)); err != nil {
				return err
			}
		} else if err := step("residual and ffn norm", k.AddRMSNormQ(c, s, a.h, a.tmp, lw.ffnNorm, a.xn, T, cfg.Dim, eps)); err != nil {
			return err
		}
		if err := step("unpacking gate, up", m.unpack(c, s, l, &lw, unpackFFNIn)); err != nil {
			return err
		}
		act := kernels.SwiGLU
		if gemma {
			act = kernels.GeGLU
		}
		activate, err := m.gateUp(c, s, &lw, T, act)
		if err := step("gate, up", err); err != nil {
			return err
		}
		if activate {
			if gemma {
				err = k.GeGLU(c, s, a.gate, a.up, a.gate, int64(T)*ffn)
			} else {
				err = k.SwiGLU(c, s, a.gate, a.up, a.gate, int64(T)*ffn)
			}
			if err := step("activation", err); err != nil {
				return err
			}
		}
		if err := step("unpacking down", m.unpack(c, s, l, &lw, unpackFFNOut)); err != nil {
			return err
		}
		acc, err := m.down(c, s, &lw, T, gemma, fx, l&1)
		if err := step("down", err); err != nil {
			return err
		}
		if gemma {
			if err := step("post-ffn norm", k.RMSNorm(c, s, a.tmp, lw.postFFNNorm, a.tmp, T, cfg.Dim, eps)); err != nil {
				return err
			}
		}
		// With every layer resident, the next layer's attention norm
		// weights are in place: fuse the residual update with that norm.
		// A down product in fixed point (acc != 0) is added from there.
		if !gemma && m.pass.fuseElementwise && m.tb == nil && l+1 < last {
			if acc != 0 {
				err = k.AddFixedRMSNormQ(c, s, a.h, acc, m.layers[l+1].attnNorm, a.xn, T, cfg.Dim, eps)
				fx.dirty[l&1] = true
			} else {
				err = k.AddRMSNormQ(c, s, a.h, a.tmp, m.layers[l+1].attnNorm, a.xn, T, cfg.Dim, eps)
			}
			if err := step("residual and next attention norm", err); err != nil {
				return err
			}
			normed = true
		} else {
			if acc != 0 {
				err = k.AddFixed(c, s, a.h, acc, int64(T)*dim)
			} else {
				err = k.Add(c, s, a.h, a.tmp, int64(T)*dim)
			}
			if err := step("residual", err); err != nil {
				return err
			}
		}
		if streaming {
			if err := step("releasing its slot", m.tb.done(l)); err != nil {
				return err
			}
		}
	}
	mark(p.trace, TraceLayers)
	if cpuPass {
		m.hy.stats.Passes++
		if T <= len(m.hy.seen) {
			m.hy.seen[T-1].passes++
		}
	}
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cancelled before output: %w", err)
		}
	}
	for _, r := range p.out {
		if err := k.RMSNormQ(c, s, a.h.Add(int64(r.t0)*dim*f), m.outNorm, a.outX.Add(int64(r.r0)*dim*f), r.n, cfg.Dim, eps); err != nil {
			return fmt.Errorf("output norm: %w", err)
		}
	}
	if err := k.MatMul(c, s, m.output, a.outX, a.logits, p.R); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	if fc := cfg.FinalSoftcap; fc > 0 {
		if err := k.Softcap(c, s, a.logits, int64(p.R)*int64(cfg.Vocab), fc); err != nil {
			return fmt.Errorf("output soft-cap: %w", err)
		}
	}
	if p.sel {
		if err := k.Argmax(c, s, a.logits, p.R, cfg.Vocab, a.tokens); err != nil {
			return fmt.Errorf("greedy token selection: %w", err)
		}
	}
	return nil
}

// enqueueGEMVs enqueues the matrix products of a batch-1 decode pass alone,
// launched as enqueue launches them (fused or not), reading and writing the
// activation buffers: what benchmarks time to get the GEMVs' effective
// bandwidth. The values computed are meaningless, and the fixed-point
// accumulators down adds into (a.fx) are left holding them: call
// resetFixed after the last replay, before the next Forward.
func (m *Model) enqueueGEMVs(c *cudadrv.Ctx, kinds gemvKind) error {
	k, s, a := m.k, m.stream, &m.act
	dim := m.Config.Dim
	// In the step a norm leaves a.xn (and a.outX) quantized for the GEMVs
	// that read it (RMSNormQ), and attention a.att (AttentionDecodeQ):
	// their x needs no launch here either.
	var fx fixedState
	for l, lw := range m.layers {
		if kinds&gemvQKV != 0 {
			k.MarkQuantized(s, a.xn, 1, dim)
			if err := m.qkv(c, s, &lw, 1); err != nil {
				return err
			}
		}
		if kinds&gemvO != 0 {
			// Decode attention leaves a.att quantized too (AttentionDecodeQ)
			// where each 64-block of it lies within one head.
			if m.Config.HeadDim%64 == 0 {
				k.MarkQuantized(s, a.att, 1, m.Config.Heads*m.Config.HeadDim)
			}
			if err := k.GEMV(c, s, lw.o, a.att, a.tmp, 1); err != nil {
				return err
			}
		}
		if kinds&gemvGateUp != 0 {
			k.MarkQuantized(s, a.xn, 1, dim)
			// The products alone: the activation, where it is a launch of
			// its own, is not a GEMV.
			if _, err := m.gateUp(c, s, &lw, 1, kernels.SwiGLU); err != nil {
				return err
			}
		}
		if kinds&gemvDown != 0 {
			if kinds&gemvDownHeld != 0 && !k.MarkQuantized(s, a.gate, 1, lw.down.Cols) {
				return fmt.Errorf("down's x (%d columns) cannot be held quantized", lw.down.Cols)
			}
			if kinds&gemvDownHeld != 0 {
				// The one-vector kernels on the held x, never the column
				// slices (which quantize their own).
				if err := k.GEMV(c, s, lw.down, a.gate, a.tmp, 1); err != nil {
					return err
				}
			} else if _, err := m.down(c, s, &lw, 1, false, &fx, l&1); err != nil {
				return err
			}
		}
	}
	if kinds&gemvOutput == 0 {
		return nil
	}
	k.MarkQuantized(s, a.outX, 1, dim)
	return k.GEMV(c, s, m.output, a.outX, a.logits, 1)
}

// qkv launches layer lw's q, k and v products for T rows of a.xn: one
// fused launch where the kernels take the three (decode passes of up to
// MaxFusedGEMVBatch tokens), else one product each. enqueue and
// enqueueGEMVs both launch them here, so the benchmarks time what the
// step runs.
func (m *Model) qkv(c *cudadrv.Ctx, s cudadrv.Stream, lw *layerW, T int) error {
	k, a := m.k, &m.act
	if m.pass.fuseGEMV && k.CanFuseGEMV(T, lw.q, lw.k, lw.v) {
		return k.GEMVFused(c, s, a.xn, T, kernels.GEMVOut{W: lw.q, Y: a.q}, kernels.GEMVOut{W: lw.k, Y: a.k}, kernels.GEMVOut{W: lw.v, Y: a.v})
	}
	for _, g := range []struct {
		name string
		w    kernels.Matrix
		y    cudadrv.DevPtr
	}{{"q", lw.q, a.q}, {"k", lw.k, a.k}, {"v", lw.v, a.v}} {
		if err := k.MatMul(c, s, g.w, a.xn, g.y, T); err != nil {
			return fmt.Errorf("%s: %w", g.name, err)
		}
	}
	return nil
}

// qkvExtras applies, after the q, k and v products of T rows, what some
// architectures add before RoPE: Qwen2's biases (one row-wise add per
// token and matrix: the rows are contiguous in a.q, a.k and a.v) and
// Qwen3's and Gemma 3's RMSNorm of each query and key head (the rows of
// T*heads heads of HeadDim values each, normalised in place with the one
// weight vector all heads share).
func (m *Model) qkvExtras(c *cudadrv.Ctx, s cudadrv.Stream, lw *layerW, T int) error {
	cfg := &m.Config
	k, a := m.k, &m.act
	if lw.qBias != 0 {
		for _, b := range []struct {
			name string
			x, b cudadrv.DevPtr
			n    int64
		}{{"q", a.q, lw.qBias, int64(cfg.QDim())}, {"k", a.k, lw.kBias, int64(cfg.KVDim())}, {"v", a.v, lw.vBias, int64(cfg.KVDim())}} {
			if err := m.addRows(c, s, b.x, b.b, a.att, T, b.n); err != nil {
				return fmt.Errorf("%s bias: %w", b.name, err)
			}
		}
	}
	if lw.qNorm != 0 {
		if err := k.RMSNorm(c, s, a.q, lw.qNorm, a.q, T*cfg.Heads, cfg.HeadDim, cfg.NormEps); err != nil {
			return fmt.Errorf("q norm: %w", err)
		}
		if err := k.RMSNorm(c, s, a.k, lw.kNorm, a.k, T*cfg.KVHeads, cfg.HeadDim, cfg.NormEps); err != nil {
			return fmt.Errorf("k norm: %w", err)
		}
	}
	return nil
}

// addRows adds the n-vector b to each of T rows of x. For more than one
// row, b is copied into scratch (T*n floats, free at the call) and
// doubled there by copies, then added by one launch: a launch per row cost
// a prompt of 512 tokens three thousand launches a layer. a.att serves as
// scratch before the attention writes it.
func (m *Model) addRows(c *cudadrv.Ctx, s cudadrv.Stream, x, b, scratch cudadrv.DevPtr, T int, n int64) error {
	if T == 1 {
		return m.k.Add(c, s, x, b, n)
	}
	row := n * 4
	if err := c.CopyDtoD(scratch, b, row, s); err != nil {
		return err
	}
	for have := int64(1); have < int64(T); have *= 2 {
		if err := c.CopyDtoD(scratch.Add(have*row), scratch, min(have, int64(T)-have)*row, s); err != nil {
			return err
		}
	}
	return m.k.Add(c, s, x, scratch, int64(T)*n)
}

// down launches layer lw's down product for T rows of a.gate: for one
// token, where the kernels take it, by column slices into a.fx's set buf
// (kernels.GEMVSliced, which quantize their own x: no launch for it, and
// zero the other set, which the previous layer's residual update has
// read), returning those accumulators, which the residual update must add;
// else MatMul into a.tmp, returning 0. Not for gemma, whose post-FFN norm
// reads the product in floats. enqueue and enqueueGEMVs both launch it
// here.
func (m *Model) down(c *cudadrv.Ctx, s cudadrv.Stream, lw *layerW, T int, gemma bool, fx *fixedState, buf int) (cudadrv.DevPtr, error) {
	k, a := m.k, &m.act
	if !gemma && m.downSliced(lw, T) {
		n := kernels.GEMVFixedBytes(m.Config.Dim)
		acc, other := a.fx.Add(int64(buf)*n), a.fx.Add(int64(1-buf)*n)
		if fx.dirty[buf] { // a product no sliced launch has zeroed since
			if err := c.MemsetD8(acc, 0, n, s); err != nil {
				return 0, fmt.Errorf("zeroing the fixed-point accumulators: %w", err)
			}
			fx.dirty[buf] = false
		}
		ok, err := k.GEMVSliced(c, s, lw.down, a.gate, acc, other)
		if err != nil {
			return 0, err
		}
		if ok {
			fx.used, fx.dirty[1-buf] = true, false
			return acc, nil
		}
	}
	return 0, k.MatMul(c, s, lw.down, a.gate, a.tmp, T)
}

// downSliced reports whether down takes lw's product by column slices
// (for a model other than gemma).
func (m *Model) downSliced(lw *layerW, T int) bool {
	return T == 1 && m.pass.slicedDown && m.act.fx != 0 && m.k.GEMVSlicedTakes(lw.down, m.act.gate)
}

// resetFixed zeroes both sets of a.fx and waits for it (after
// enqueueGEMVs' replays, which leave them holding sums).
func (m *Model) resetFixed(c *cudadrv.Ctx) error {
	if m.act.fx == 0 {
		return nil
	}
	if err := m.settleFixed(c, m.stream, &fixedState{used: true}, true); err != nil {
		return err
	}
	return c.StreamSync(m.stream)
}

// gateUp launches layer lw's gate and up products for T rows of a.xn: one
// GEMVGLU launch, act applied in its epilogue into a.gate, where the
// kernels take the pair, else one product each into a.gate and a.up, and
// then activate reports that act is still to be applied. enqueue and
// enqueueGEMVs both launch them here.
func (m *Model) gateUp(c *cudadrv.Ctx, s cudadrv.Stream, lw *layerW, T int, act kernels.GLU) (activate bool, err error) {
	k, a := m.k, &m.act
	if m.pass.fuseGEMV && lw.gate.Type == lw.up.Type && lw.gate.Rows == lw.up.Rows && k.CanFuseGEMV(T, lw.gate, lw.up) {
		return false, k.GEMVGLU(c, s, lw.gate, lw.up, a.xn, a.gate, T, act)
	}
	if err := k.MatMul(c, s, lw.gate, a.xn, a.gate, T); err != nil {
		return false, fmt.Errorf("gate: %w", err)
	}
	if err := k.MatMul(c, s, lw.up, a.xn, a.up, T); err != nil {
		return false, fmt.Errorf("up: %w", err)
	}
	return true, nil
}

// gemvKind selects the matrix products enqueueGEMVs launches.
type gemvKind uint8

const (
	gemvQKV gemvKind = 1 << iota
	gemvO
	gemvGateUp
	gemvDown
	gemvOutput
	// gemvDownHeld, with gemvDown, launches each down product with its x
	// declared already quantized (kernels.MarkQuantized), so the chain
	// times the products without down's x launch. The profile that sets
	// it quantizes that x first (the scratch then holds it: down launches
	// leave it alone); the step itself never sets it.
	gemvDownHeld
	gemvAll = gemvQKV | gemvO | gemvGateUp | gemvDown | gemvOutput
)
