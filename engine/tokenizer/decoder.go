package tokenizer

import "unicode/utf8"

// Decoder turns a stream of generated ids into text for token-by-token
// printing. A character split across several byte tokens (emoji, CJK under
// byte-level BPE or SentencePiece byte fallback) is held back until it is
// complete, so each Add returns only whole UTF-8 characters.
//
// Unlike Decode, a Decoder never strips the SentencePiece space prefix: it
// is meant for continuations, where a leading space separates the generated
// word from the prompt. Control and unknown-type tokens produce no text.
// A Decoder is not safe for concurrent use.
type Decoder struct {
	t   *Tokenizer
	buf []byte
}

// NewDecoder returns a streaming decoder for this tokenizer.
func (t *Tokenizer) NewDecoder() *Decoder {
	return &Decoder{t: t}
}

// Add appends one token and returns the text that became complete, possibly
// "". Ids outside the vocabulary produce U+FFFD.
func (d *Decoder) Add(id int32) string {
	switch {
	case !d.t.valid(id):
		d.buf = append(d.buf, "\uFFFD"...)
	case d.t.hidden(id):
		return ""
	default:
		d.buf = append(d.buf, d.t.piece(id)...)
	}
	n := completePrefix(d.buf)
	if n == 0 {
		return ""
	}
	out := string(d.buf[:n])
	d.buf = append(d.buf[:0], d.buf[n:]...)
	return out
}

// Flush returns whatever is still held back (an incomplete UTF-8 sequence,
// returned as its raw bytes) and resets the decoder.
func (d *Decoder) Flush() string {
	out := string(d.buf)
	d.buf = d.buf[:0]
	return out
}

// completePrefix returns the length of the longest prefix of b that does not
// end inside a UTF-8 sequence that could still be completed by more bytes.
// Bytes that can never become valid UTF-8 are not held back.
func completePrefix(b []byte) int {
	// A sequence is at most 4 bytes, so only the last 3 can be a pending one.
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		c := b[i]
		if c < 0x80 {
			return len(b) // ASCII: everything before is settled
		}
		if c >= 0xC0 { // lead byte of the last sequence
			if !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
		// continuation byte: keep looking for the lead
	}
	return len(b)
}
