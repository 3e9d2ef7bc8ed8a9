package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/openai"
)

// DefaultSocket is where stratad listens unless told otherwise.
const DefaultSocket = "/run/strata/strata.sock"

// ErrUnreachable is returned (wrapped) when no daemon answers.
var ErrUnreachable = errors.New("cannot reach stratad")

// APIError is an error response from the daemon.
type APIError struct {
	Status int
	openai.ErrorDetail
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("stratad: %s (HTTP %d", e.Message, e.Status)
	if e.Code != nil {
		s += ", " + *e.Code
	}
	return s + ")"
}

// Client is a connection to one daemon. It is safe for concurrent use.
type Client struct {
	base   string
	target string
	apiKey string
	hc     *http.Client
}

// New returns a client for target: a Unix socket path, or an http:// or
// https:// base URL (then apiKey is sent as a Bearer token).
func New(target, apiKey string) *Client {
	c := &Client{target: target, apiKey: apiKey}
	if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
		c.base = strings.TrimRight(target, "/")
		c.hc = &http.Client{}
		return c
	}
	c.base = "http://stratad"
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", target)
		},
		DisableCompression: true,
	}
	c.hc = &http.Client{Transport: tr}
	return c
}

// Target is the socket path or URL the client talks to.
func (c *Client) Target() string { return c.target }

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w at %s: %v", ErrUnreachable, c.target, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb openai.ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" {
			eb.Error.Message = strings.TrimSpace(string(b))
		}
		return nil, &APIError{Status: resp.StatusCode, ErrorDetail: eb.Error}
	}
	return resp, nil
}

func (c *Client) getJSON(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding %s response: %w", path, err)
	}
	return nil
}

// Models lists the loaded models.
func (c *Client) Models(ctx context.Context) (openai.ModelList, error) {
	var l openai.ModelList
	return l, c.getJSON(ctx, http.MethodGet, "/v1/models", nil, &l)
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (api.Status, error) {
	var s api.Status
	return s, c.getJSON(ctx, http.MethodGet, api.PathStatus, nil, &s)
}

// Health checks that the daemon answers.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	return h, c.getJSON(ctx, http.MethodGet, api.PathHealth, nil, &h)
}

// Load asks the daemon to load a model (admin only).
func (c *Client) Load(ctx context.Context, r api.LoadRequest) (api.ModelStatus, error) {
	var s api.ModelStatus
	return s, c.getJSON(ctx, http.MethodPost, api.PathLoad, r, &s)
}

// Unload asks the daemon to unload a model (admin only).
func (c *Client) Unload(ctx context.Context, name string) (api.UnloadResponse, error) {
	var u api.UnloadResponse
	return u, c.getJSON(ctx, http.MethodPost, api.PathUnload, api.UnloadRequest{Name: name}, &u)
}

// Metrics returns the Prometheus text exposition.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	resp, err := c.do(ctx, http.MethodGet, api.PathMetric, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Chat runs a chat completion. When r.Stream is set, onChunk is called
// for every chunk as it arrives and the returned completion is assembled
// from them; otherwise onChunk is not called.
func (c *Client) Chat(ctx context.Context, r openai.ChatRequest, onChunk func(openai.ChatChunk) error) (*openai.ChatCompletion, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/chat/completions", r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !r.Stream {
		var cc openai.ChatCompletion
		if err := json.NewDecoder(resp.Body).Decode(&cc); err != nil {
			return nil, fmt.Errorf("decoding chat completion: %w", err)
		}
		return &cc, nil
	}
	out := &openai.ChatCompletion{Object: openai.ObjectChatCompletion,
		Choices: []openai.ChatChoice{{Message: openai.AssistantMessage{Role: "assistant"}}}}
	var text strings.Builder
	err = readStream(resp.Body, func(data []byte) error {
		var ch openai.ChatChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return fmt.Errorf("decoding chunk: %w", err)
		}
		out.ID, out.Created, out.Model = ch.ID, ch.Created, ch.Model
		for _, cc := range ch.Choices {
			if cc.Delta.Content != nil {
				text.WriteString(*cc.Delta.Content)
			}
			if cc.FinishReason != nil {
				out.Choices[0].FinishReason = *cc.FinishReason
			}
		}
		if len(ch.Usage) > 0 && string(ch.Usage) != "null" {
			var u openai.Usage
			if err := json.Unmarshal(ch.Usage, &u); err == nil {
				out.Usage = &u
			}
		}
		if onChunk != nil {
			return onChunk(ch)
		}
		return nil
	})
	out.Choices[0].Message.Content = text.String()
	return out, err
}

// Complete runs a legacy completion, streamed like Chat.
func (c *Client) Complete(ctx context.Context, r openai.CompletionRequest, onChunk func(openai.TextCompletion) error) (*openai.TextCompletion, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/completions", r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !r.Stream {
		var tc openai.TextCompletion
		if err := json.NewDecoder(resp.Body).Decode(&tc); err != nil {
			return nil, fmt.Errorf("decoding completion: %w", err)
		}
		return &tc, nil
	}
	out := &openai.TextCompletion{Object: openai.ObjectTextCompletion, Choices: []openai.TextChoice{{}}}
	var text strings.Builder
	err = readStream(resp.Body, func(data []byte) error {
		var ch openai.TextCompletion
		if err := json.Unmarshal(data, &ch); err != nil {
			return fmt.Errorf("decoding chunk: %w", err)
		}
		out.ID, out.Created, out.Model = ch.ID, ch.Created, ch.Model
		for _, cc := range ch.Choices {
			text.WriteString(cc.Text)
			if cc.FinishReason != nil {
				out.Choices[0].FinishReason = cc.FinishReason
			}
		}
		if len(ch.Usage) > 0 && string(ch.Usage) != "null" {
			out.Usage = ch.Usage
		}
		if onChunk != nil {
			return onChunk(ch)
		}
		return nil
	})
	out.Choices[0].Text = text.String()
	return out, err
}

// readStream reads server-sent events until [DONE], turning an error
// event into an *APIError.
func readStream(r io.Reader, fn func([]byte) error) error {
	er := openai.NewEventReader(r)
	for {
		data, err := er.Next()
		if err != nil {
			return fmt.Errorf("reading stream: %w", err)
		}
		if string(data) == openai.Done {
			return nil
		}
		if bytes.HasPrefix(data, []byte(`{"error"`)) {
			var eb openai.ErrorBody
			if json.Unmarshal(data, &eb) == nil {
				return &APIError{Status: http.StatusOK, ErrorDetail: eb.Error}
			}
		}
		if err := fn(data); err != nil {
			return err
		}
	}
}
