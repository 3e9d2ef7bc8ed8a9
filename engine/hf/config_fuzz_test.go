package hf

import "testing"

// FuzzParseConfig feeds parseConfig arbitrary config.json bytes: a config
// it accepts validates, and nothing it reads can make it panic or size a
// table by an absurd value.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"model_type":"llama","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"max_position_embeddings":64,"vocab_size":32,
		  "rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":16}}`,
		`{"model_type":"gemma3","text_config":{"hidden_size":64,"num_hidden_layers":6,"head_dim":1000000000000}}`,
		`{"model_type":"phi3","hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"max_position_embeddings":64,"vocab_size":32,
		  "original_max_position_embeddings":16,"rope_scaling":{"type":"longrope","long_factor":[1,2,3,4,5,6,7,8],"short_factor":[1,1,1,1,1,1,1,1]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseConfig(b)
		if err != nil {
			return
		}
		if err := s.cfg.Validate(); err != nil {
			t.Fatalf("parseConfig accepted an invalid config: %v", err)
		}
	})
}
