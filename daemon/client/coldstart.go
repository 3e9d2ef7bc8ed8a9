package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
)

// ColdStart loads req's model (a file or nvme://BDF/NSID/NAME, not yet
// loaded), times the load and a one-token greedy completion of prompt
// from the load request on, unloads it, and relates the time to the first
// token to reading the pool once at the storage rate the daemon measured
// for the plan (see bench.ColdStartResult). The model is unloaded also
// when the completion fails.
func (c *Client) ColdStart(ctx context.Context, req api.LoadRequest, prompt string) (res *bench.ColdStartResult, err error) {
	if req.Name == "" {
		req.Name = fmt.Sprintf("coldstart-%d", time.Now().UnixNano())
	}
	t0 := time.Now()
	st, err := c.Load(ctx, req)
	if err != nil {
		return nil, err
	}
	loaded := time.Since(t0)
	defer func() {
		if _, uerr := c.Unload(context.WithoutCancel(ctx), st.Name); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unloading %s: %w", st.Name, uerr))
		}
	}()
	one, zero := int64(1), 0.0
	if _, err := c.Complete(ctx, openai.CompletionRequest{Model: st.Name, Prompt: &openai.Prompt{Text: prompt}, MaxTokens: &one, Temperature: &zero}, nil); err != nil {
		return nil, fmt.Errorf("first token: %w", err)
	}
	first := time.Since(t0)
	res = &bench.ColdStartResult{Model: req.Path, Name: st.Name, PoolBytes: st.Memory.WeightBytes,
		LoadSeconds: loaded.Seconds(), FirstTokenSeconds: first.Seconds()}
	if st.TierCRoute != nil {
		res.Route = st.TierCRoute.Route
	}
	var bps float64
	var notes []string
	if st.Plan != nil {
		bps, notes = st.Plan.LinkBPS.Storage, st.Plan.LinkNotes
	}
	res.SetStorage(bps, notes)
	return res, nil
}
