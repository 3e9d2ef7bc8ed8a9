package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Done is the payload of the event that ends a stream.
const Done = "[DONE]"

// WriteEvent writes v as one server-sent event: "data: JSON\n\n".
func WriteEvent(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding event: %w", err)
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	_, err = w.Write(buf)
	return err
}

// WriteDone writes the final "data: [DONE]" event.
func WriteDone(w io.Writer) error {
	_, err := io.WriteString(w, "data: "+Done+"\n\n")
	return err
}

// ErrNoDone is returned by EventReader.Next when the stream ends without
// the final [DONE] event (the server died or the connection broke).
var ErrNoDone = errors.New("event stream ended without [DONE]")

// EventReader reads the event stream stratad writes, strictly: every event
// is exactly one "data: " line followed by an empty line. Anything else
// (other fields, comments, missing blank lines, data after [DONE]) is an
// error, so framing mistakes are caught rather than tolerated.
type EventReader struct {
	br   *bufio.Reader
	done bool
}

// NewEventReader reads events from r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next event's data. It returns io.EOF after [DONE] when
// the stream then ends cleanly, and ErrNoDone when it ends before [DONE].
// The [DONE] event itself is reported as data "[DONE]".
func (r *EventReader) Next() ([]byte, error) {
	line, err := r.br.ReadBytes('\n')
	if err == io.EOF && len(line) == 0 {
		if r.done {
			return nil, io.EOF
		}
		return nil, ErrNoDone
	}
	if err != nil {
		// A partial line is a torn stream, never the clean io.EOF.
		return nil, fmt.Errorf("reading event: %w", unexpectedEOF(err))
	}
	if r.done {
		return nil, fmt.Errorf("data after [DONE]: %q", line)
	}
	data, ok := bytes.CutPrefix(line, []byte("data: "))
	if !ok {
		return nil, fmt.Errorf("event line %q does not start with \"data: \"", line)
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	blank, err := r.br.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("reading event terminator: %w", unexpectedEOF(err))
	}
	if string(blank) != "\n" {
		return nil, fmt.Errorf("event not followed by a blank line: %q", blank)
	}
	if string(data) == Done {
		r.done = true
	}
	return data, nil
}

// unexpectedEOF turns io.EOF met inside an event into io.ErrUnexpectedEOF,
// so that errors.Is(err, io.EOF) means only a clean end after [DONE].
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// WriteNamedEvent writes v as one event of type name ("event: NAME" then
// its data), the form of the Responses API's streams.
func WriteNamedEvent(w io.Writer, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding event: %w", err)
	}
	buf := make([]byte, 0, len(b)+len(name)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	_, err = w.Write(buf)
	return err
}
