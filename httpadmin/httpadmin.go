package httpadmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/geofabric"
	"github.com/fabriq-io/fabriq/transport"
)

// Prefix is where the API's routes start.
const Prefix = "/admin/v1/"

// maxBody bounds a request's JSON body.
const maxBody = 1 << 20

// requestTimeout bounds one request's work in the cluster.
const requestTimeout = 25 * time.Second

// Config configures the API.
type Config struct {
	// Dial returns a client of the cluster presenting token (empty: the
	// request had none). The API closes it after the request.
	Dial func(token string) (*client.Client, error)
	// Logger receives failures that are the server's, not the caller's.
	Logger *slog.Logger
}

// api serves the routes.
type api struct {
	cfg Config
}

// Register adds the API's routes to mux:
//
//	GET    /admin/v1/tenants
//	PUT    /admin/v1/tenants/{tenant}
//	DELETE /admin/v1/tenants/{tenant}
//	GET    /admin/v1/tenants/{tenant}/fabrics
//	PUT    /admin/v1/tenants/{tenant}/fabrics/{fabric}                 body: FabricSpec
//	GET    /admin/v1/tenants/{tenant}/fabrics/{fabric}
//	DELETE /admin/v1/tenants/{tenant}/fabrics/{fabric}
//	GET    /admin/v1/tenants/{tenant}/fabrics/{fabric}/streams
//	PUT    /admin/v1/tenants/{tenant}/fabrics/{fabric}/streams/{stream}  body: StreamSpec
//	GET    /admin/v1/tenants/{tenant}/fabrics/{fabric}/streams/{stream}
//	DELETE /admin/v1/tenants/{tenant}/fabrics/{fabric}/streams/{stream}[?force=true]
//	PUT    .../streams/{stream}/retention                              body: retention policy
//	GET    .../streams/{stream}/subscriptions
//	DELETE .../streams/{stream}/subscriptions/{subscription}[?force=true]
//	POST   .../streams/{stream}/subscriptions/{subscription}/reset     body: ResetSpec
//	POST   .../streams/{stream}/subscriptions/{subscription}/skip
//	GET    /admin/v1/cluster
//
// A request carries its token as "Authorization: Bearer TOKEN". Answers
// are JSON; a refusal is {"code": CODE, "message": TEXT}, CODE the
// binary protocol's error name, with the status ErrorStatus gives.
func Register(mux *http.ServeMux, cfg Config) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &api{cfg: cfg}
	const (
		tenant = Prefix + "tenants/{tenant}"
		fabric = tenant + "/fabrics/{fabric}"
		stream = fabric + "/streams/{stream}"
		sub    = stream + "/subscriptions/{subscription}"
	)
	a.route(mux, "GET "+Prefix+"tenants", a.listTenants)
	a.route(mux, "PUT "+tenant, a.createTenant)
	a.route(mux, "DELETE "+tenant, a.deleteTenant)
	a.route(mux, "GET "+tenant+"/fabrics", a.listFabrics)
	a.route(mux, "PUT "+fabric, a.createFabric)
	a.route(mux, "GET "+fabric, a.describeFabric)
	a.route(mux, "DELETE "+fabric, a.deleteFabric)
	a.route(mux, "GET "+fabric+"/streams", a.listStreams)
	a.route(mux, "PUT "+stream, a.createStream)
	a.route(mux, "GET "+stream, a.describeStream)
	a.route(mux, "DELETE "+stream, a.deleteStream)
	a.route(mux, "PUT "+stream+"/retention", a.setRetention)
	a.route(mux, "GET "+stream+"/subscriptions", a.listSubscriptions)
	a.route(mux, "DELETE "+sub, a.deleteSubscription)
	a.route(mux, "POST "+sub+"/reset", a.resetCursor)
	a.route(mux, "POST "+sub+"/skip", a.skipBacklog)
	a.route(mux, "GET "+Prefix+"cluster", a.clusterStatus)
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("no admin route %s %s", r.Method, r.URL.Path))
	})
}

// handler is one route's work: it answers a value to encode (nil: 204 No
// Content), or an error.
type handler func(ctx context.Context, c *client.Client, r *http.Request) (any, error)

// route registers h: it reads the token, opens the client, runs h with a
// deadline and writes the answer.
func (a *api) route(mux *http.ServeMux, pattern string, h handler) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		token, ok := bearer(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, transport.CodeAuthenticationFailed.String(), `the Authorization header is not "Bearer TOKEN"`)
			return
		}
		c, err := a.cfg.Dial(token)
		if err != nil {
			a.cfg.Logger.Warn("admin API: no client of the cluster", "err", err)
			writeError(w, http.StatusInternalServerError, transport.CodeUnknown.String(), err.Error())
			return
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		res, err := h(ctx, c, r)
		if err != nil {
			status, code := ErrorStatus(err)
			if status >= 500 {
				a.cfg.Logger.Warn("admin API request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			msg := err.Error()
			var te *transport.Error
			if errors.As(err, &te) && te.Message != "" {
				msg = te.Message // the node's words, without the client's path to them
			}
			writeError(w, status, code, msg)
			return
		}
		if res == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	})
}

// bearer returns the request's bearer token: "" without an Authorization
// header, not ok with one of another form.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", true
	}
	scheme, token, found := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// errorBody is a refusal's JSON.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fabriq"`)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Code: code, Message: msg})
}

// errBadRequest marks a request this API cannot read.
var errBadRequest = errors.New("bad request")

// ErrorStatus returns the HTTP status and code name of an error a client
// call or this API returned.
func ErrorStatus(err error) (int, string) {
	var te *transport.Error
	if errors.As(err, &te) {
		return codeStatus(te.Code), te.Code.String()
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, transport.CodeTooLarge.String()
	case errors.Is(err, geofabric.ErrInvalidName):
		return http.StatusBadRequest, transport.CodeInvalidName.String()
	case errors.Is(err, errBadRequest), errors.Is(err, client.ErrNotAllowed):
		return http.StatusBadRequest, transport.CodeInvalidArgument.String()
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, transport.CodeTimeout.String()
	}
	return http.StatusBadGateway, transport.CodeUnknown.String()
}

func codeStatus(c transport.ErrorCode) int {
	switch c {
	case transport.CodeAuthenticationFailed:
		return http.StatusUnauthorized
	case transport.CodeAuthorizationFailed:
		return http.StatusForbidden
	case transport.CodeStreamNotFound, transport.CodeSubscriptionNotFound, transport.CodeTenantNotFound, transport.CodeFabricNotFound:
		return http.StatusNotFound
	case transport.CodeStreamExists, transport.CodeTenantExists, transport.CodeFabricExists, transport.CodeNotEmpty, transport.CodeNotAllowed:
		return http.StatusConflict
	case transport.CodeInvalidName, transport.CodeInvalidArgument, transport.CodeTooLarge:
		return http.StatusBadRequest
	case transport.CodeLimitExceeded, transport.CodeRateLimited:
		return http.StatusTooManyRequests
	case transport.CodeServiceNotReady, transport.CodeNotLeader, transport.CodeDiskFull, transport.CodeClosed:
		return http.StatusServiceUnavailable
	case transport.CodeTimeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// decode reads a JSON body into v; unknown fields are an error. An empty
// body leaves v as it is when optional.
func decode(r *http.Request, v any, optional bool) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) && optional {
		return nil
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: the JSON body: %v", errBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: the JSON body holds more than one value", errBadRequest)
	}
	return nil
}

// flag reads a boolean query parameter (absent: false).
func flag(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: ?%s=%s: want true or false", errBadRequest, name, v)
	}
	return b, nil
}
