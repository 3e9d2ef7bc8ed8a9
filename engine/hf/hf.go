package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/strata-llm/strata/engine/model"
	"github.com/strata-llm/strata/engine/safetensors"
	"github.com/strata-llm/strata/engine/tokenizer"
)

// File names of a Hugging Face model directory besides the weights.
const (
	TokenizerFile        = "tokenizer.json"
	TokenizerConfigFile  = "tokenizer_config.json"
	GenerationConfigFile = "generation_config.json"
	ChatTemplateFile     = "chat_template.jinja"
)

// Model is an opened Hugging Face model directory: the engine's model over
// the mapped safetensors files and the tokenizer's vocabulary.
type Model struct {
	// Dir is the directory it was opened from.
	Dir string
	// ModelType is config.json's model_type.
	ModelType string
	Model     *model.Model
	Vocab     *tokenizer.Vocab

	st *safetensors.Model
}

// IsDir reports whether path is a directory holding a config.json: the
// form a Hugging Face model is downloaded in.
func IsDir(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	st, err = os.Stat(filepath.Join(path, safetensors.ConfigFile))
	return err == nil && st.Mode().IsRegular()
}

// Open opens the Hugging Face model in dir: config.json, model.safetensors
// or the sharded index, tokenizer.json with tokenizer_config.json, and
// generation_config.json and chat_template.jinja where present. The
// safetensors files are copied into memory (safetensors.LoadDir), so what
// is served stays what was loaded whatever happens to them; the weights
// stay there until Close, and the Model must not be used after.
func Open(dir string) (*Model, error) { return open(dir, safetensors.LoadDir) }

// OpenShared is Open over read-only mappings of the safetensors files
// (safetensors.OpenDir), for a tool that reads the model once, such as a
// conversion to a pool: nothing is copied, but a file truncated meanwhile
// kills the process with SIGBUS.
func OpenShared(dir string) (*Model, error) { return open(dir, safetensors.OpenDir) }

func open(dir string, openST func(string) (*safetensors.Model, error)) (*Model, error) {
	cfgBytes, err := os.ReadFile(filepath.Join(dir, safetensors.ConfigFile))
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	s, err := parseConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("hf: %s: %w", dir, err)
	}
	vocab, err := readVocab(dir, cfgBytes, s.cfg.Vocab)
	if err != nil {
		return nil, fmt.Errorf("hf: %s: %w", dir, err)
	}
	st, err := openST(dir)
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	w, err := (&loader{s: s, st: st}).weights()
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("hf: %s: %w", dir, err)
	}
	mod, err := model.New(s.cfg, w)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("hf: %s: %w", dir, err)
	}
	return &Model{Dir: dir, ModelType: s.modelType, Model: mod, Vocab: vocab, st: st}, nil
}

// Close releases the weights.
func (m *Model) Close() error {
	if m == nil || m.st == nil {
		return nil
	}
	err := m.st.Close()
	m.st = nil
	return err
}

// readVocab reads tokenizer.json and tokenizer_config.json, padded to the
// model's vocabulary, with the special ids config.json and
// generation_config.json give where the tokenizer files name none.
func readVocab(dir string, cfgBytes []byte, vocabSize int) (*tokenizer.Vocab, error) {
	tj, err := os.ReadFile(filepath.Join(dir, TokenizerFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no %s: %w (strata reads Hugging Face tokenizers from tokenizer.json only)", TokenizerFile, ErrUnsupported)
	}
	if err != nil {
		return nil, err
	}
	tc, err := optionalFile(filepath.Join(dir, TokenizerConfigFile))
	if err != nil {
		return nil, err
	}
	v, err := tokenizer.VocabFromHF(tj, tc, vocabSize)
	if err != nil {
		if errors.Is(err, tokenizer.ErrUnsupportedHF) {
			err = fmt.Errorf("%w: %w", err, ErrUnsupported)
		}
		return nil, err
	}
	if v.ChatTemplate == "" {
		// transformers 4.47 and later save the template beside the
		// tokenizer config instead of in it.
		t, err := optionalFile(filepath.Join(dir, ChatTemplateFile))
		if err != nil {
			return nil, err
		}
		v.ChatTemplate = string(t)
	}
	var ids struct {
		BOS json.RawMessage `json:"bos_token_id"`
		EOS json.RawMessage `json:"eos_token_id"`
	}
	gc, err := optionalFile(filepath.Join(dir, GenerationConfigFile))
	if err != nil {
		return nil, err
	}
	for _, b := range [][]byte{gc, cfgBytes} {
		if b == nil {
			continue
		}
		ids.BOS, ids.EOS = nil, nil
		if err := json.Unmarshal(b, &ids); err != nil {
			return nil, fmt.Errorf("reading special token ids: %w", err)
		}
		bos, eos := tokenIDs(ids.BOS), tokenIDs(ids.EOS)
		if v.BOS < 0 && len(bos) > 0 && inVocab(bos[0], v) {
			v.BOS = bos[0]
		}
		for _, id := range eos {
			switch {
			case !inVocab(id, v):
			case v.EOS < 0:
				v.EOS = id
			case v.EOT < 0 && id != v.EOS:
				// Instruct models end a turn with a token of their
				// own that generation_config lists beside EOS.
				v.EOT = id
			}
		}
	}
	return v, nil
}

// optionalFile reads path, nil when it does not exist.
func optionalFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// tokenIDs decodes an id or a list of ids (generation_config's
// eos_token_id may be either); anything else is none.
func tokenIDs(b json.RawMessage) []int32 {
	var one int32
	if json.Unmarshal(b, &one) == nil && len(b) > 0 && string(b) != "null" {
		return []int32{one}
	}
	var many []int32
	if json.Unmarshal(b, &many) == nil {
		return many
	}
	return nil
}

func inVocab(id int32, v *tokenizer.Vocab) bool { return id >= 0 && int(id) < len(v.Tokens) }
