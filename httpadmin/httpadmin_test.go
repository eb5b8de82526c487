package httpadmin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

func TestErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{&transport.Error{Code: transport.CodeAuthenticationFailed}, 401, "AuthenticationFailed"},
		{fmt.Errorf("partition 1: %w", &transport.Error{Code: transport.CodeAuthorizationFailed}), 403, "AuthorizationFailed"},
		{&transport.Error{Code: transport.CodeStreamNotFound}, 404, "StreamNotFound"},
		{&transport.Error{Code: transport.CodeSubscriptionNotFound}, 404, "SubscriptionNotFound"},
		{&transport.Error{Code: transport.CodeTenantExists}, 409, "TenantExists"},
		{&transport.Error{Code: transport.CodeNotEmpty}, 409, "NotEmpty"},
		{&transport.Error{Code: transport.CodeNotAllowed}, 409, "NotAllowed"},
		{&transport.Error{Code: transport.CodeInvalidArgument}, 400, "InvalidArgument"},
		{&transport.Error{Code: transport.CodeRateLimited}, 429, "RateLimited"},
		{&transport.Error{Code: transport.CodeServiceNotReady}, 503, "ServiceNotReady"},
		{&transport.Error{Code: transport.CodeUnknown}, 500, "Unknown"},
		{fmt.Errorf("%w: x", geofabric.ErrInvalidName), 400, "InvalidName"},
		{fmt.Errorf("%w: x", errBadRequest), 400, "InvalidArgument"},
		{context.DeadlineExceeded, 504, "Timeout"},
		{errors.New("connection refused"), 502, "Unknown"},
	} {
		status, code := ErrorStatus(tc.err)
		if status != tc.status || code != tc.code {
			t.Errorf("ErrorStatus(%v) = %d %s, want %d %s", tc.err, status, code, tc.status, tc.code)
		}
	}
}

func TestResetSpec(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	zero, three := 0, 3
	offset := uint64(42)
	for _, tc := range []struct {
		spec ResetSpec
		want client.CursorPosition
		ok   bool
	}{
		{ResetSpec{To: "earliest"}, client.CursorAtEarliest(), true},
		{ResetSpec{To: "latest"}, client.CursorAtLatest(), true},
		{ResetSpec{Time: &now}, client.CursorAtTime(now), true},
		{ResetSpec{Partition: &three, Offset: &offset}, client.CursorAtOffset(3, 42), true},
		{ResetSpec{}, client.CursorPosition{}, false},
		{ResetSpec{To: "yesterday"}, client.CursorPosition{}, false},
		{ResetSpec{To: "earliest", Time: &now}, client.CursorPosition{}, false},
		{ResetSpec{Offset: &offset}, client.CursorPosition{}, false},
		{ResetSpec{To: "latest", Partition: &zero}, client.CursorPosition{}, false},
	} {
		got, err := tc.spec.position()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: err %v, want ok %v", tc.spec, err, tc.ok)
			continue
		}
		if err != nil && !errors.Is(err, errBadRequest) {
			t.Errorf("%+v: %v is not a bad request", tc.spec, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%+v: %v, want %v", tc.spec, got, tc.want)
		}
	}
}

// A request with an Authorization header that is not a bearer token is
// refused before any client is dialled; one with no header dials without
// a token.
func TestBearer(t *testing.T) {
	var dialled []string
	mux := http.NewServeMux()
	Register(mux, Config{Dial: func(token string) (*client.Client, error) {
		dialled = append(dialled, token)
		return nil, errors.New("no cluster here")
	}})
	for _, tc := range []struct {
		header string
		status int
	}{
		{"Basic b3BzOm9wcw==", 401},
		{"Bearer", 401},
		{"Bearer  ", 401},
		{"", 500},           // dialled with no token
		{"bearer abc", 500}, // dialled with abc
	} {
		req := httptest.NewRequest("GET", "/admin/v1/tenants", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		if w.Code != tc.status {
			t.Errorf("Authorization %q: %d, want %d: %s", tc.header, w.Code, tc.status, w.Body)
		}
	}
	if fmt.Sprint(dialled) != "[ abc]" {
		t.Errorf("dialled with tokens %q, want none then abc", dialled)
	}
}
