package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-llm/strata/daemon/api"
)

// buildStrata compiles the real binary once per test run, so these tests
// drive exactly what a user runs.
func buildStrata(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "strata")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func runStrata(t *testing.T, bin, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir(), "HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running strata %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func TestCLI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildStrata(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")

	// The subtests run in order: the first writes the model the others use.
	t.Run("synth", func(t *testing.T) {
		_, stderr, code := runStrata(t, bin, "", "model", "synth", "--arch", "llama", "--shape", "tiny", "--type", "q4_k_m", "-o", model)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})
	t.Run("run streams the prompt and a completion", func(t *testing.T) {
		out, stderr, code := runStrata(t, bin, "", "run", "--model", model, "--prompt", "Hello", "-n", "8", "--stats", "--stats-every", "3")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.HasPrefix(out, "Hello") || len(out) <= len("Hello\n") {
			t.Errorf("stdout %q: want the prompt followed by generated text", out)
		}
		if !strings.Contains(stderr, "completion: 8 tokens") {
			t.Errorf("stats missing from stderr: %q", stderr)
		}
		// Windows of three after the first token: 2-4 and 5-7; token 8
		// ends none.
		if !strings.Contains(stderr, "tokens 2-4: ") || !strings.Contains(stderr, "tokens 5-7: ") || strings.Contains(stderr, "tokens 8") {
			t.Errorf("--stats-every 3 over 8 tokens: want windows 2-4 and 5-7 alone in %q", stderr)
		}
	})
	t.Run("run under a JSON Schema", func(t *testing.T) {
		// The model's weights are random: only the constraint makes JSON.
		schema := `{"type":"object","properties":{"ok":{"type":"boolean"},"n":{"type":"integer","minimum":1,"maximum":9}},"required":["ok","n"]}`
		out, stderr, code := runStrata(t, bin, "", "run", "--model", model, "--prompt", "", "-n", "200", "-t", "0.9", "--seed", "2", "--json-schema", schema, "--stats")
		var v struct {
			OK *bool
			N  int
		}
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.OK == nil || v.N < 1 || v.N > 9 || !strings.Contains(stderr, "finish: stop") {
			t.Fatalf("exit %d, stdout %q: %s", code, out, stderr)
		}
		gf := filepath.Join(dir, "yes.gbnf")
		if err := os.WriteFile(gf, []byte(`root ::= "yes" | "no"`), 0o644); err != nil {
			t.Fatal(err)
		}
		out, stderr, code = runStrata(t, bin, "", "run", "--model", model, "--prompt", "", "-n", "20", "-t", "1", "--grammar-file", gf)
		if out = strings.TrimSpace(out); code != 0 || (out != "yes" && out != "no") {
			t.Fatalf("exit %d, stdout %q: %s", code, out, stderr)
		}
	})
	t.Run("run with the default model speaks English", func(t *testing.T) {
		out, stderr, code := runStrata(t, bin, "", "run", "-n", "12")
		if code != 0 {
			t.Fatalf("exit %d, stdout %q: %s", code, out, stderr)
		}
		// stories260K's greedy continuation of the default prompt.
		if want := "Once upon a time, there was a little girl named Lily."; !strings.HasPrefix(out, want) {
			t.Errorf("stdout %q, want it to start %q", out, want)
		}
	})
	t.Run("tokenize matches llama.cpp's vectors", func(t *testing.T) {
		vocab := filepath.Join("..", "..", "engine", "tokenizer", "testdata", "ggml-vocab-llama-bpe.gguf")
		for _, c := range []struct{ in, want string }{
			{"Hello world", "9906 1917"},
			{" Hello, world!", "22691 11 1917 0"},
			{"", ""},
		} {
			out, stderr, code := runStrata(t, bin, c.in, "model", "tokenize", "--model", vocab)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if got := strings.TrimSuffix(out, "\n"); got != c.want {
				t.Errorf("tokenize %q = %q, want %q", c.in, got, c.want)
			}
		}
	})
	t.Run("inspect --json", func(t *testing.T) {
		out, stderr, code := runStrata(t, bin, "", "model", "inspect", "--json", model)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var v struct {
			Metadata map[string]any `json:"metadata"`
			Tensors  []struct {
				Name, Type string
			} `json:"tensors"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("inspect output is not JSON: %v", err)
		}
		if v.Metadata["general.architecture"] != "llama" || len(v.Tensors) == 0 {
			t.Errorf("unexpected inspect output: arch %v, %d tensors", v.Metadata["general.architecture"], len(v.Tensors))
		}
	})
	t.Run("errors and exit codes", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			code int
			msg  string
		}{
			{[]string{"run", "--model", filepath.Join(dir, "missing.gguf")}, exitNotFound, "missing.gguf"},
			{[]string{"run", "--model", model, "-n", "0"}, 2, "max-tokens"},
			{[]string{"run", "--model", model, "--stats-every", "-1"}, 2, "stats-every"},
			{[]string{"model", "synth", "--shape", "huge", "-o", filepath.Join(dir, "x.gguf")}, 2, "huge"},
			{[]string{"model", "inspect"}, 2, "exactly one FILE"},
			{[]string{"run", "--no-such-flag"}, 2, "no-such-flag"},
			{[]string{"run", "--model", model, "--json-schema", `{"type":"integer","multipleOf":2}`}, 2, `"multipleOf" is not supported`},
			{[]string{"run", "--model", model, "--grammar-file", filepath.Join(dir, "missing.gbnf")}, exitNotFound, "missing.gbnf"},
			{[]string{"run", "--model", model, "--json-schema", "{}", "--grammar-file", "x"}, 2, "give one"},
		} {
			_, stderr, code := runStrata(t, bin, "", c.args...)
			if code != c.code || !strings.Contains(stderr, c.msg) {
				t.Errorf("strata %v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, stderr, c.code, c.msg)
			}
		}
	})
}

// TestDescribeBackend: the one-line backend description names the GPU,
// the kernel build it runs and what streams, or the CPU and why.
func TestDescribeBackend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		b    api.BackendStatus
		want []string
	}{
		{"cuda resident", api.BackendStatus{Name: "cuda", Device: "NVIDIA H200", ComputeCapability: "9.0", DeviceMemoryBytes: 140 << 30,
			WeightBytes: 5 << 30, Kernels: "sm_90 cubin (ptxas 11.8)"},
			[]string{"cuda on NVIDIA H200", "sm 9.0", "kernels: sm_90 cubin (ptxas 11.8)"}},
		{"cuda streamed, no kernels field", api.BackendStatus{Name: "cuda", Device: "NVIDIA H200", ComputeCapability: "9.0", StreamedBytesPerPass: 2 << 30},
			[]string{"streamed per pass"}},
		{"cpu", api.BackendStatus{Name: "cpu", Reason: "CUDA unavailable: no device"}, []string{"cpu", "CUDA unavailable: no device"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := describeBackend(tc.b)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("describeBackend = %q, want it to contain %q", got, w)
				}
			}
			if tc.b.Kernels == "" && strings.Contains(got, "kernels:") {
				t.Errorf("describeBackend = %q names kernels it was not given", got)
			}
		})
	}
}

// TestExitCodes: every failure class a script can meet without a daemon
// exits with the code README's table gives it (the daemon's classes, 4
// and 6, are the daemon client's tests').
func TestExitCodes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildStrata(t)
	missing := filepath.Join(t.TempDir(), "missing.gguf")
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--version"}, 0},
		{[]string{"bogus"}, exitUsage},
		{[]string{"model", "bogus"}, exitUsage},
		{[]string{"bench", "bogus"}, exitUsage},
		{[]string{"run", "--no-such-flag"}, exitUsage},
		{[]string{"run", "--model", missing, "-n", "0"}, exitUsage},
		{[]string{"run", missing}, exitUsage}, // a model named without --model is not quietly ignored
		{[]string{"status", "extra", "--socket", sock}, exitUsage},
		{[]string{"run", "--model", missing}, exitNotFound},
		{[]string{"plan", missing, "--no-measure"}, exitNotFound},
		{[]string{"model", "inspect", missing}, exitNotFound},
		{[]string{"models", "--socket", sock}, exitUnreachable},
		{[]string{"status", "--socket", sock}, exitUnreachable},
	} {
		_, stderr, code := runStrata(t, bin, "", tc.args...)
		if code != tc.want {
			t.Errorf("strata %v: exit %d, want %d (%s)", tc.args, code, tc.want, strings.TrimSpace(stderr))
		}
	}
}
