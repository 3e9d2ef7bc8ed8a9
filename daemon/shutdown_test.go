package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-llm/strata/daemon/openai"
)

// When the shutdown grace runs out, every stream still running ends with
// an error event saying the server is shutting down (or had finished with
// [DONE]): none is torn, over the socket or TCP, run after run.
func TestShutdownCutsStreamsCleanly(t *testing.T) {
	t.Parallel()
	bias := []string{}
	for id := 496; id < 512; id++ {
		bias = append(bias, fmt.Sprintf(`"%d":-100`, id))
	}
	body := `{"model":"tiny","messages":[{"role":"user","content":"go on"}],"max_tokens":230,"temperature":0,"stream":true,"logit_bias":{` +
		strings.Join(bias, ",") + `}}`
	for _, network := range []string{"unix", "tcp"} {
		for run := range 3 {
			t.Run(fmt.Sprintf("%s-%d", network, run), func(t *testing.T) {
				t.Parallel()
				h := start(t, opts{tcp: true, cfg: Config{ShutdownTimeout: 150 * time.Millisecond, Limits: Limits{MaxBatch: 4}}})
				const n = 40
				var wg, started sync.WaitGroup
				torn := make([]string, n)
				cut := make([]bool, n)
				for i := range n {
					wg.Add(1)
					started.Add(1)
					go func() {
						defer wg.Done()
						var resp *http.Response
						var err error
						if network == "unix" {
							resp, err = h.hc.Post("http://stratad/v1/chat/completions", "application/json", strings.NewReader(body))
						} else {
							req, _ := http.NewRequestWithContext(context.Background(), "POST", h.tcp+"/v1/chat/completions", strings.NewReader(body))
							req.Header.Set("Authorization", "Bearer test-key")
							resp, err = http.DefaultClient.Do(req)
						}
						started.Done()
						if err != nil {
							torn[i] = err.Error()
							return
						}
						defer resp.Body.Close()
						if resp.StatusCode != 200 {
							b, _ := io.ReadAll(resp.Body)
							torn[i] = fmt.Sprintf("status %d %s", resp.StatusCode, b)
							return
						}
						er := openai.NewEventReader(resp.Body)
						var last []byte
						for {
							d, err := er.Next()
							switch {
							case err == io.EOF:
								return // [DONE]
							case err == openai.ErrNoDone:
								if !bytes.Contains(last, []byte(`"error"`)) || !bytes.Contains(last, []byte(`"server_shutting_down"`)) {
									torn[i] = fmt.Sprintf("ended without [DONE] after %s", last)
								}
								cut[i] = true
								return
							case err != nil:
								torn[i] = fmt.Sprintf("%v after %s", err, last)
								return
							}
							last = d
						}
					}()
				}
				started.Wait()
				h.cancel()
				wg.Wait()
				nCut := 0
				for i := range n {
					if torn[i] != "" {
						t.Errorf("stream %d torn: %s", i, torn[i])
					}
					if cut[i] {
						nCut++
					}
				}
				if nCut == 0 {
					t.Errorf("no stream was running when the grace ran out: the test proves nothing")
				}
				t.Logf("%d of %d streams cut by the shutdown", nCut, n)
			})
		}
	}
}
