package model

// The two sizes below are the planner's KVBytes and ScratchBytes inputs
// (engine/tier's Request). They are worked out from the Config here, next
// to the forward pass whose buffers they describe, so the planner's package
// needs no model type and storage packages can import it.

// KVCacheBytes is the CPU backend's KV cache for batch sequences of ctx
// positions: keys and values, float32, for every layer.
func KVCacheBytes(cfg Config, ctx, batch int) int64 {
	return 2 * int64(cfg.Layers) * int64(ctx) * int64(cfg.KVDim()) * 4 * int64(max(batch, 1))
}

// ScratchBytes estimates the activation scratch of one pass of tokens
// tokens over sequences of up to ctx positions: the CPU engine's
// per-token buffers (residual, norms, Q/K/V, attention output, FFN gate and
// up, RoPE tables), one attention score row per core, and the logits.
// Prefill of more tokens at once needs proportionally more.
func ScratchBytes(cfg Config, ctx, tokens, cores int) int64 {
	perTok := int64(3*cfg.Dim+2*cfg.QDim()+2*cfg.KVDim()+2*cfg.FFN+cfg.HeadDim+cfg.Vocab) * 4
	return int64(max(tokens, 1))*perTok + int64(max(cores, 1))*int64(ctx)*4
}
