package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Error types used in the "type" field, as OpenAI uses them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeUnavailable    = "service_unavailable"
)

// Error is an API error: the HTTP status it is sent with and the body
// fields. It implements error so handlers can return it through layers.
type Error struct {
	Status  int
	Message string
	Type    string
	Param   string // "" is sent as null
	Code    string // "" is sent as null
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Errorf builds an Error.
func Errorf(status int, typ, param, code, format string, a ...any) *Error {
	return &Error{Status: status, Type: typ, Param: param, Code: code, Message: fmt.Sprintf(format, a...)}
}

// BadRequest is a 400 invalid_request_error about param.
func BadRequest(param, format string, a ...any) *Error {
	return Errorf(http.StatusBadRequest, TypeInvalidRequest, param, "", format, a...)
}

// ErrorBody is the JSON document of an error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the "error" object. Param and Code are null when unset,
// as in OpenAI's responses.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Body returns the JSON body for e.
func (e *Error) Body() ErrorBody {
	d := ErrorDetail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		p := e.Param
		d.Param = &p
	}
	if e.Code != "" {
		c := e.Code
		d.Code = &c
	}
	return ErrorBody{Error: d}
}

// AsError returns err as an *Error, mapping anything else to a 500
// server_error carrying err's message.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: err.Error()}
}

// WriteError sends err as an OpenAI-shaped error response.
func WriteError(w http.ResponseWriter, err error) {
	e := AsError(err)
	w.Header().Set("Content-Type", "application/json")
	if e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable {
		// A busy server says when to try again (clients' retry logic
		// honours it): a second, the scale of a queue slot freeing.
		if w.Header().Get("Retry-After") == "" {
			w.Header().Set("Retry-After", "1")
		}
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.Body())
}
