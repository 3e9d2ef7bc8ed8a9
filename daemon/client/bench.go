package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/strata-llm/strata/bench"
	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
)

// BenchStorage runs a storage sweep in the daemon: on a namespace of a
// controller it holds, or on a file in its model directories. onProgress,
// if not nil, is called after each point.
func (c *Client) BenchStorage(ctx context.Context, r api.BenchStorageRequest, onProgress func(bench.Progress)) (*bench.StorageResult, error) {
	ev, err := c.bench(ctx, api.PathBenchStorage, r, onProgress)
	if err != nil {
		return nil, err
	}
	if ev.Storage == nil {
		return nil, errors.New("stratad: bench response without a storage result")
	}
	return ev.Storage, nil
}

// BenchPCIe runs a PCIe copy sweep on the daemon's GPU.
func (c *Client) BenchPCIe(ctx context.Context, r api.BenchPCIeRequest, onProgress func(bench.Progress)) (*bench.PCIeResult, error) {
	ev, err := c.bench(ctx, api.PathBenchPCIe, r, onProgress)
	if err != nil {
		return nil, err
	}
	if ev.PCIe == nil {
		return nil, errors.New("stratad: bench response without a PCIe result")
	}
	return ev.PCIe, nil
}

// BenchE2E asks the daemon which storage → GPU routes exist and measures
// those that can run.
func (c *Client) BenchE2E(ctx context.Context, r api.BenchE2ERequest, onProgress func(bench.Progress)) (*bench.E2EResult, error) {
	ev, err := c.bench(ctx, api.PathBenchE2E, r, onProgress)
	if err != nil {
		return nil, err
	}
	if ev.E2E == nil {
		return nil, errors.New("stratad: bench response without an e2e result")
	}
	return ev.E2E, nil
}

// bench posts a bench request and reads its NDJSON events up to the final
// one, which it returns; an error event becomes an *APIError with the
// status the daemon gave it.
func (c *Client) bench(ctx context.Context, path string, body any, onProgress func(bench.Progress)) (api.BenchEvent, error) {
	resp, err := c.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return api.BenchEvent{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev api.BenchEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return api.BenchEvent{}, fmt.Errorf("decoding bench event: %w", err)
		}
		switch {
		case ev.Error != nil:
			d := openai.ErrorDetail{Message: ev.Error.Message, Type: ev.Error.Type}
			if ev.Error.Code != "" {
				code := ev.Error.Code
				d.Code = &code
			}
			return ev, &APIError{Status: ev.Error.Status, ErrorDetail: d}
		case ev.Progress != nil:
			if onProgress != nil {
				onProgress(*ev.Progress)
			}
		default:
			return ev, nil
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return api.BenchEvent{}, ctx.Err()
		}
		return api.BenchEvent{}, fmt.Errorf("reading bench events: %w", err)
	}
	return api.BenchEvent{}, errors.New("stratad: bench response ended without a result")
}
