package openai

import (
	"net/http/httptest"
	"testing"
)

// TestRetryAfter: a 429 or 503 tells the client when to retry; other
// errors do not.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		want   string
	}{{429, "1"}, {503, "1"}, {400, ""}, {500, ""}} {
		w := httptest.NewRecorder()
		WriteError(w, Errorf(tc.status, TypeRateLimit, "", "x", "busy"))
		if got := w.Header().Get("Retry-After"); got != tc.want || w.Code != tc.status {
			t.Errorf("%d: Retry-After %q (status %d), want %q", tc.status, got, w.Code, tc.want)
		}
	}
}
