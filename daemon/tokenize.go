package daemon

import (
	"net/http"

	"github.com/strata-llm/strata/daemon/openai"
)

// TokenizeRequest is the body of POST /tokenize (llama-server's form):
// the text, whether to add the model's special tokens (BOS) and whether
// to answer each id with its piece. Model names a loaded model; it may be
// left out when exactly one is loaded.
type TokenizeRequest struct {
	Model      string `json:"model,omitempty"`
	Content    string `json:"content"`
	AddSpecial bool   `json:"add_special,omitempty"`
	WithPieces bool   `json:"with_pieces,omitempty"`
}

// TokenPiece is one token with its text (with_pieces).
type TokenPiece struct {
	ID    int32  `json:"id"`
	Piece string `json:"piece"`
}

// TokenizeResponse holds the ids, or the ids with their pieces.
type TokenizeResponse struct {
	Tokens any `json:"tokens"`
}

// DetokenizeRequest is the body of POST /detokenize.
type DetokenizeRequest struct {
	Model  string  `json:"model,omitempty"`
	Tokens []int32 `json:"tokens"`
}

// DetokenizeResponse is the text of the tokens.
type DetokenizeResponse struct {
	Content string `json:"content"`
}

// PathTokenize and PathDetokenize are llama-server's paths.
const (
	PathTokenize   = "/tokenize"
	PathDetokenize = "/detokenize"
)

// modelFor resolves a request's model: the named one, or the only one.
func (s *Server) modelFor(name string) (*loaded, error) {
	if name != "" {
		return s.lookup(name)
	}
	names := s.modelNames()
	if len(names) != 1 {
		return nil, openai.BadRequest("model", "%d models are loaded: name one in \"model\"", len(names))
	}
	return s.lookup(names[0])
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) error {
	var req TokenizeRequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	lm, err := s.modelFor(req.Model)
	if err != nil {
		return err
	}
	ids := lm.eng.Tok.Encode(req.Content, req.AddSpecial, req.AddSpecial)
	if !req.WithPieces {
		if ids == nil {
			ids = []int32{}
		}
		return writeJSON(w, TokenizeResponse{Tokens: ids})
	}
	pieces := make([]TokenPiece, len(ids))
	for i, id := range ids {
		pieces[i] = TokenPiece{ID: id, Piece: string(lm.eng.Tok.Piece(id))}
	}
	return writeJSON(w, TokenizeResponse{Tokens: pieces})
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) error {
	var req DetokenizeRequest
	if err := s.readStrict(w, r, &req); err != nil {
		return err
	}
	lm, err := s.modelFor(req.Model)
	if err != nil {
		return err
	}
	vocab := lm.eng.Model.Config.Vocab
	for i, id := range req.Tokens {
		if id < 0 || int(id) >= vocab {
			return openai.BadRequest("tokens", "tokens[%d] = %d is outside the vocabulary (0..%d)", i, id, vocab-1)
		}
	}
	return writeJSON(w, DetokenizeResponse{Content: lm.eng.Tok.Decode(req.Tokens)})
}
