package daemon

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"

	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/engine"
)

// PathEmbeddings is OpenAI's embeddings endpoint.
const PathEmbeddings = "/v1/embeddings"

// maxEmbedInputs bounds the inputs of one embeddings request.
const maxEmbedInputs = 256

// EmbeddingRequest is the body of POST /v1/embeddings. Input is a string,
// an array of strings, an array of token ids or an array of such arrays.
type EmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format,omitempty"`
	Dimensions     *int            `json:"dimensions,omitempty"`
	User           string          `json:"user,omitempty"`
}

// Embedding is one input's vector: []float32, or a base64 string of its
// little-endian float32s.
type Embedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// EmbeddingResponse answers POST /v1/embeddings.
type EmbeddingResponse struct {
	Object string      `json:"object"`
	Data   []Embedding `json:"data"`
	Model  string      `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// embedInputs turns the input forms into token ids (texts without BOS,
// as an embedding model's tokenizer is applied by clients that send ids).
func embedInputs(raw json.RawMessage, encode func(string) []int32) ([][]int32, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return [][]int32{encode(one)}, nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		out := make([][]int32, len(texts))
		for i, t := range texts {
			out[i] = encode(t)
		}
		return out, nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		return [][]int32{ids}, nil
	}
	var batch [][]int32
	if json.Unmarshal(raw, &batch) == nil {
		return batch, nil
	}
	return nil, openai.BadRequest("input", "input must be a string, an array of strings, an array of token ids or an array of arrays of them")
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) error {
	var req EmbeddingRequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	if req.Model == "" {
		return openai.BadRequest("model", "you must provide a model parameter")
	}
	lm, err := s.lookup(req.Model)
	if err != nil {
		return err
	}
	if len(req.Input) == 0 || string(req.Input) == "null" {
		return openai.BadRequest("input", "you must provide an input")
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return openai.BadRequest("encoding_format", "encoding_format must be float or base64, got %q", req.EncodingFormat)
	}
	c := lm.eng.Model.Config
	if req.Dimensions != nil && *req.Dimensions != c.Dim {
		return openai.BadRequest("dimensions", "this model's embeddings have %d dimensions; it cannot give %d", c.Dim, *req.Dimensions)
	}
	inputs, err := embedInputs(req.Input, func(t string) []int32 { return lm.eng.Tok.Encode(t, false, false) })
	if err != nil {
		return err
	}
	if len(inputs) == 0 || len(inputs) > maxEmbedInputs {
		return openai.BadRequest("input", "input must hold 1 to %d items, got %d", maxEmbedInputs, len(inputs))
	}
	for i, toks := range inputs {
		if len(toks) == 0 {
			return openai.BadRequest("input", "input %d encodes to no tokens", i)
		}
		if len(toks) > c.Context {
			return openai.Errorf(http.StatusBadRequest, openai.TypeInvalidRequest, "input", "context_length_exceeded",
				"input %d has %d tokens; this model's context is %d", i, len(toks), c.Context)
		}
		for _, id := range toks {
			if id < 0 || int(id) >= c.Vocab {
				return openai.BadRequest("input", "input %d: token id %d is outside the vocabulary (0..%d)", i, id, c.Vocab-1)
			}
		}
	}
	resp := EmbeddingResponse{Object: "list", Model: lm.name, Data: make([]Embedding, len(inputs))}
	for i, toks := range inputs {
		v, err := lm.eng.Embed(r.Context(), toks)
		if errors.Is(err, engine.ErrNoHostWeights) {
			return openai.Errorf(http.StatusUnprocessableEntity, openai.TypeInvalidRequest, "model", "embeddings_unavailable",
				"the model `%s` streams its layers, and embeddings are computed from weights in host memory: %v", lm.name, err)
		}
		if err != nil {
			return err
		}
		var out any = v
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			out = base64.StdEncoding.EncodeToString(b)
		}
		resp.Data[i] = Embedding{Object: "embedding", Index: i, Embedding: out}
		resp.Usage.PromptTokens += len(toks)
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	return writeJSON(w, resp)
}
