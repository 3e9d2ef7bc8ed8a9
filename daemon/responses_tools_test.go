package daemon

import (
	"bufio"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/openai"
	"github.com/strata-llm/strata/daemon/toolcall"
	"github.com/strata-llm/strata/internal/daemon/sched"
)

// outputItem is the part of a Responses output item the tests read.
type outputItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Status    string `json:"status"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Content   []struct {
		Text string `json:"text"`
	} `json:"content"`
}

type responseBody struct {
	Status     string       `json:"status"`
	Output     []outputItem `json:"output"`
	Tools      []any        `json:"tools"`
	ToolChoice any          `json:"tool_choice"`
}

// TestResponsesToolsServed: function tools, a function_call and its
// function_call_output in the input are served against the tiny model,
// the tools echoed, whole and streamed.
func TestResponsesToolsServed(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	bare := start(t, opts{setup: func(s *Server) { s.constrainSchema = nil }})
	const tool = `{"type":"function","name":"wx","parameters":{"type":"object","properties":{"c":{"type":"string"}}}}`
	input := `[{"role":"user","content":"Paris?"},{"type":"function_call","call_id":"call_1","name":"wx","arguments":"{\"c\":\"P\"}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"21"}]`
	body := `{"model":"tiny","max_output_tokens":6,"temperature":0,"tools":[` + tool + `],"tool_choice":{"type":"function","name":"wx"},"input":` + input
	code, b := bare.post(t, PathResponses, body+`}`)
	if code != 400 || !strings.Contains(string(b), `"param":"tool_choice"`) {
		t.Errorf("named function without constrained decoding: %d %s", code, b)
	}
	body = strings.Replace(body, `,"tool_choice":{"type":"function","name":"wx"}`, "", 1)
	code, b = h.post(t, PathResponses, body+`}`)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var r responseBody
	if err := json.Unmarshal(b, &r); err != nil || len(r.Output) == 0 || r.ToolChoice != "auto" || len(r.Tools) != 1 {
		t.Fatalf("%v %s", err, b)
	}
	for _, it := range r.Output {
		if it.Type != "message" && it.Type != "function_call" || it.Status != "completed" {
			t.Errorf("output item %+v", it)
		}
	}
	resp, err := h.hc.Post("http://stratad"+PathResponses, "application/json", strings.NewReader(body+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := readNamedEvents(t, bufio.NewReader(resp.Body))
	if len(evs) < 3 || evs[0].name != "response.created" || evs[len(evs)-1].name != "response.completed" && evs[len(evs)-1].name != "response.incomplete" {
		t.Fatalf("events %v", evs)
	}
}

type namedEvent struct {
	name string
	data map[string]any
}

// readNamedEvents reads a Responses stream, checking each event's type is
// its name and sequence numbers count up from 0.
func readNamedEvents(t *testing.T, br *bufio.Reader) []namedEvent {
	t.Helper()
	var evs []namedEvent
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return evs
		}
		name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "event: ")
		if !ok {
			t.Fatalf("line %q: want an event: line", line)
		}
		data, _ := br.ReadString('\n')
		blank, _ := br.ReadString('\n')
		var ev namedEvent
		ev.name = name
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &ev.data); err != nil || blank != "\n" {
			t.Fatalf("event %s: %v %q", name, err, data)
		}
		if ev.data["type"] != name || ev.data["sequence_number"] != float64(len(evs)) {
			t.Fatalf("event %s: type %v sequence %v", name, ev.data["type"], ev.data["sequence_number"])
		}
		evs = append(evs, ev)
	}
}

// TestResponsesWithToolsAnswers reads a scripted answer with text and two
// calls into output items, whole and streamed (items added and done in
// order, arguments as deltas).
func TestResponsesWithToolsAnswers(t *testing.T) {
	t.Parallel()
	tok := func(id int32, text string) sched.Event { return sched.Event{Token: id, Text: text} }
	tokens := []sched.Event{tok(1, "Let me see.\n<tool_call>{\"name\": \"wx\", \"arguments\": {\"c\":"), tok(2, " \"P\"}}</tool_call>"),
		tok(3, "<tool_call>{\"name\": \"wx\", \"arguments\": {}}</tool_call>")}
	wantItems := []outputItem{{Type: "message", Content: []struct {
		Text string `json:"text"`
	}{{"Let me see.\n"}}}, {Type: "function_call", Name: "wx", Arguments: `{"c": "P"}`}, {Type: "function_call", Name: "wx", Arguments: `{}`}}
	norm := func(items []outputItem) []outputItem {
		out := make([]outputItem, len(items))
		for i, it := range items {
			if it.Status != "completed" || it.ID == "" || it.Type == "function_call" && !strings.HasPrefix(it.CallID, "call_") {
				t.Errorf("item %+v: want completed, with ids", it)
			}
			it.Status, it.ID, it.CallID = "", "", ""
			out[i] = it
		}
		return out
	}
	plan := &toolPlan{set: &openai.ToolSet{Tools: []toolcall.Tool{{Name: "wx"}}, Choice: openai.ToolChoiceAuto, Parallel: true}, family: toolcall.Hermes}
	s := &Server{}
	r := httptest.NewRequest("POST", PathResponses, nil)

	w := httptest.NewRecorder()
	if err := s.responsesWithTools(w, r, &Response{Output: []responseItem{}}, plan, scripted(tokens, "stop"), func() {}, false); err != nil {
		t.Fatal(err)
	}
	var whole responseBody
	if err := json.Unmarshal(w.Body.Bytes(), &whole); err != nil {
		t.Fatal(err)
	}
	if got := norm(whole.Output); whole.Status != "completed" || !reflect.DeepEqual(got, wantItems) {
		t.Errorf("output %+v, want %+v", got, wantItems)
	}

	w = httptest.NewRecorder()
	if err := s.responsesWithTools(w, r, &Response{Output: []responseItem{}}, plan, scripted(tokens, "stop"), func() {}, true); err != nil {
		t.Fatal(err)
	}
	evs := readNamedEvents(t, bufio.NewReader(w.Body))
	var names []string
	args := map[float64]string{}
	var done []outputItem
	for _, ev := range evs {
		names = append(names, ev.name)
		switch ev.name {
		case "response.function_call_arguments.delta":
			args[ev.data["output_index"].(float64)] += ev.data["delta"].(string)
		case "response.output_item.done":
			b, _ := json.Marshal(ev.data["item"])
			var it outputItem
			json.Unmarshal(b, &it)
			done = append(done, it)
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("events\n%v\nwant\n%v", names, want)
	}
	if args[1] != `{"c": "P"}` || args[2] != `{}` {
		t.Errorf("argument deltas %v", args)
	}
	if got := norm(done); !reflect.DeepEqual(got, wantItems) {
		t.Errorf("items done %+v, want %+v", got, wantItems)
	}
	var final responseBody
	b, _ := json.Marshal(evs[len(evs)-1].data["response"])
	json.Unmarshal(b, &final)
	if got := norm(final.Output); !reflect.DeepEqual(got, wantItems) {
		t.Errorf("completed response's output %+v", got)
	}
}
