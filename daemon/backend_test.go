package daemon

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
	"github.com/strata-llm/strata/daemon/client"
)

// TestBackendStatus: the status names each model's backend and, on the
// CPU, why the GPU is not used; a load that insists on CUDA without a GPU
// fails with 503 "CUDA unavailable: …" and the daemon keeps serving; the
// backend is a /metrics label.
func TestBackendStatus(t *testing.T) {
	t.Parallel()
	h := start(t, opts{})
	ctx := context.Background()
	st, err := h.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := st.Models[0]
	bi := m.BackendInfo
	if m.Backend != bi.Name || bi.Requested != "auto" {
		t.Fatalf("backend %q, info %+v", m.Backend, bi)
	}
	gpu := bi.Name == "cuda"
	if gpu {
		if bi.Device == "" || bi.DeviceMemoryBytes <= 0 || bi.WeightBytes <= 0 || bi.Reason != "" || bi.Kernels == "" {
			t.Fatalf("GPU backend status %+v", bi)
		}
	} else if bi.Name != "cpu" || !strings.HasPrefix(bi.Reason, "CUDA unavailable: ") && !strings.HasPrefix(bi.Reason, "CUDA backend failed: ") {
		t.Fatalf("CPU backend without the reason: %+v", bi)
	}
	_, b := h.get(t, "/metrics")
	want := `strata_model_backend_info{backend="` + bi.Name + `",device="` + bi.Device + `",model="tiny",requested="auto"} 1`
	if !strings.Contains(string(b), want) {
		t.Fatalf("/metrics lacks %s", want)
	}
	if os.Getuid() != 0 {
		t.Skip("loading needs uid 0 or the admin group; run as root (CI does) for the rest")
	}

	for _, tc := range []struct {
		name, backend string
		status        int
		code          string
	}{
		{"bogus", "gpu", 400, ""},
		{"forced", "cuda", 503, "backend_unavailable"},
	} {
		if gpu && tc.backend == "cuda" {
			continue
		}
		_, err := h.c.Load(ctx, api.LoadRequest{Path: "tiny.gguf", Name: tc.name, Backend: tc.backend})
		ae, ok := err.(*client.APIError)
		if !ok || ae.Status != tc.status || tc.code != "" && (ae.Code == nil || *ae.Code != tc.code) {
			t.Fatalf("load with backend %q: %v, want %d %s", tc.backend, err, tc.status, tc.code)
		}
		if tc.backend == "cuda" && !strings.Contains(ae.Message, "CUDA unavailable: ") {
			t.Fatalf("message %q does not say why", ae.Message)
		}
	}
	// Still serving: the failed load left no model behind and chat works.
	if code, b := h.post(t, "/v1/chat/completions", hello); code != 200 {
		t.Fatalf("after a failed load: %d %s", code, b)
	}
	cpu, err := h.c.Load(ctx, api.LoadRequest{Path: "tiny.gguf", Name: "oncpu", Backend: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	if cpu.Backend != "cpu" || cpu.BackendInfo.Requested != "cpu" || cpu.BackendInfo.Reason != "" {
		t.Fatalf("backend cpu load: %+v", cpu.BackendInfo)
	}
	if code, b := h.post(t, "/v1/chat/completions", strings.Replace(hello, `"tiny"`, `"oncpu"`, 1)); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	st, err = h.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Models) != 2 {
		raw, _ := json.Marshal(st.Models)
		t.Fatalf("models after one failed and one good load: %s", raw)
	}
}
